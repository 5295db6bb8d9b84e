// The CUDA backend lives in a module (libminigpt-cuda.so) that the core dlopens only when CUDA is asked
// for (src/backend/cuda_loader.cpp): a CPU run neither maps nor needs the CUDA libraries, and a CUDA request
// on a machine without them fails in one line that says why.
#include <elf.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "cuda/cuda.h"
#include "minigpt/backend.h"
#include "test_util.h"

extern char** environ;

namespace minigpt {
namespace {

namespace fs = std::filesystem;

using test::ChildRun;
using test::run_minigpt;

size_t cuda_log_line_count(const std::string& s) {
  size_t n = 0;
  for (char ch : s) n += ch == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

// The DT_NEEDED entries of a 64-bit ELF file's dynamic section (what the dynamic linker loads with it).
std::vector<std::string> elf_needed(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const uint64_t size = fs::file_size(file);
  // Bytes [off, off + len) of the file, or "" when they are not all in it.
  auto read = [&](uint64_t off, uint64_t len) {
    std::string b;
    if (off > size || len > size - off) return b;
    b.resize(len);
    in.seekg(std::streamoff(off));
    if (!in.read(b.data(), std::streamsize(len))) b.clear();
    return b;
  };
  Elf64_Ehdr eh;
  const std::string head = read(0, sizeof eh);
  if (head.size() != sizeof eh || head.compare(0, SELFMAG, ELFMAG) != 0 || head[EI_CLASS] != ELFCLASS64) {
    ADD_FAILURE() << file << " is not a 64-bit ELF file";
    return {};
  }
  std::memcpy(&eh, head.data(), sizeof eh);
  const std::string sections = read(eh.e_shoff, uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr));
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || sections.empty()) {
    ADD_FAILURE() << file << ": bad section header table";
    return {};
  }
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, sections.data() + i * sizeof sh, sizeof sh);
    return sh;
  };
  std::vector<std::string> needed;
  bool found = false;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr dyn = section(i);
    if (dyn.sh_type != SHT_DYNAMIC || dyn.sh_link >= eh.e_shnum) continue;
    const Elf64_Shdr strtab = section(dyn.sh_link);
    const std::string entries = read(dyn.sh_offset, dyn.sh_size),
                      strings = read(strtab.sh_offset, strtab.sh_size);
    found = !entries.empty() && !strings.empty();
    for (size_t off = 0; off + sizeof(Elf64_Dyn) <= entries.size(); off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, entries.data() + off, sizeof d);
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED && d.d_un.d_val < strings.size())
        needed.emplace_back(strings.c_str() + d.d_un.d_val);
    }
  }
  if (!found) ADD_FAILURE() << file << " has no readable dynamic section";
  return needed;
}

bool needs_cuda(const std::vector<std::string>& needed) {
  for (const auto& n : needed) {
    if (n.rfind("libcudart", 0) == 0 || n.rfind("libcublas", 0) == 0 || n.rfind("libcuda.", 0) == 0)
      return true;
  }
  return false;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += ' ';
    s += x;
  }
  return s;
}

// `minigpt --version` with the CUDA backend linked in peaked at ~218 MB: libcudart, libcublas and
// libcublasLt mapped and relocated at start-up. Without them it peaks at ~7 MB here (libstdc++, OpenBLAS,
// PCRE2, Pango and fontconfig: 18 MB; 141 MB under ASan+UBSan, whose binary and shadow memory have grown
// with the libraries it now links, not yet taken apart). The bounds leave room for other machines'
// libraries and are below what the ~210 MB of the CUDA libraries would add.
TEST(CudaModule, VersionRunsSmall) {
#ifdef MINIGPT_TEST_ASAN
  constexpr long kBoundKb = 200 * 1024;
#else
  constexpr long kBoundKb = 64 * 1024;
#endif
  const ChildRun r = run_minigpt({"--version"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("minigpt"), std::string::npos) << r.out;
  EXPECT_GT(r.max_rss_kb, 0);
  EXPECT_LT(r.max_rss_kb, kBoundKb) << "minigpt --version peaked at " << r.max_rss_kb / 1024 << " MB";
}

// Neither the CLI nor this test program needs a CUDA library to start; the module (in a CUDA build) does.
TEST(CudaModule, OnlyTheModuleNeedsCuda) {
  const std::vector<std::string> cli = elf_needed(MINIGPT_CLI_PATH);
  EXPECT_FALSE(cli.empty());
  EXPECT_FALSE(needs_cuda(cli)) << MINIGPT_CLI_PATH << " needs: " << join(cli);
  const std::vector<std::string> self = elf_needed("/proc/self/exe");
  EXPECT_FALSE(needs_cuda(self)) << "minigpt_tests needs: " << join(self);
#ifdef MINIGPT_WITH_CUDA
  const fs::path module = fs::path(MINIGPT_CLI_PATH).parent_path() / "libminigpt-cuda.so";
  ASSERT_TRUE(fs::exists(module)) << module;
  const std::vector<std::string> mod = elf_needed(module);
  auto needs = [&](const std::string& prefix) {
    return std::any_of(mod.begin(), mod.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
  };
  EXPECT_TRUE(needs("libcudart.so")) << join(mod);
  EXPECT_TRUE(needs("libcublas.so")) << join(mod);
#endif
}

// A CUDA request: on a machine with a usable GPU it runs; without one it fails in one line that gives the
// reason, which in a CUDA build is the CUDA runtime's (so the module was found and loaded) and arrives as
// a minigpt::Error ("minigpt: error:", not "internal error") although the module threw it.
TEST(CudaModule, CudaRequestWithoutADeviceSaysWhy) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a CUDA device is available: the no-device error cannot be seen";
  const ChildRun r =
      run_minigpt({"generate", "--backend", "cuda", "-p", "x", "--max-new-tokens", "2", "--seed", "1"});
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(cuda_log_line_count(r.err), 1u) << r.err;
  EXPECT_EQ(r.err, "minigpt: error: " + why + "\n");
#ifdef MINIGPT_WITH_CUDA
  EXPECT_EQ(why.rfind("no CUDA device: ", 0), 0u) << why;
#else
  EXPECT_NE(why.find("built without CUDA"), std::string::npos) << why;
#endif
}

TEST(CudaModule, CudaRequestWithADeviceLoadsTheModule) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const ChildRun r =
      run_minigpt({"generate", "--backend", "cuda", "-p", "x", "--max-new-tokens", "2", "--seed", "1"});
  EXPECT_EQ(r.status, 0) << r.err;
}

// The same in this process: the loader's and the module's errors are minigpt::Error with their kind.
TEST(CudaModule, ErrorsCrossTheModuleAsMinigptError) {
  std::string why;
  if (cuda_available(&why)) {
    test::expect_error([] { make_cuda_backend(1000); }, ErrorKind::Argument,
                       {"CUDA device 1000 does not exist"});
  } else {
    test::expect_error([] { make_cuda_backend(0); }, ErrorKind::Unsupported, {why});
  }
}

// cuda_devices() goes through the module too: empty where CUDA is unavailable (no module, no driver, no
// device, or a build without CUDA), the driver's devices where it is.
TEST(CudaModule, DevicesComeThroughTheModule) {
  std::string why;
  const bool available = cuda_available(&why);
  const std::vector<CudaDeviceInfo> devices = cuda_devices();
  EXPECT_EQ(devices.empty(), !available) << why;
}

// MINIGPT_CUDA_MODULE names the module to load; when that fails, the one line names it and says why.
TEST(CudaModule, UnloadableModuleIsNamed) {
  ChildRun r =
      run_minigpt({"generate", "--backend", "cuda", "-p", "x"}, {"MINIGPT_CUDA_MODULE=/nonexistent.so"});
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(cuda_log_line_count(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("minigpt: error: ", 0), 0u) << r.err;
#ifdef MINIGPT_WITH_CUDA
  EXPECT_NE(r.err.find("cannot load the CUDA backend module MINIGPT_CUDA_MODULE=/nonexistent.so: "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cannot open shared object file"), std::string::npos) << r.err;  // dlerror's words

  // A library that is not a minigpt module.
  r = run_minigpt({"generate", "--backend", "cuda", "-p", "x"}, {"MINIGPT_CUDA_MODULE=libm.so.6"});
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(cuda_log_line_count(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("libm.so.6: it is not a minigpt CUDA module"), std::string::npos) << r.err;
#else
  EXPECT_NE(r.err.find("built without CUDA"), std::string::npos) << r.err;
#endif
}

}  // namespace
}  // namespace minigpt
