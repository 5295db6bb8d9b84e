// make_cuda_backend(), cuda_available() and cuda_devices() of the core: they load the CUDA backend module
// (libminigpt-cuda.so, src/cuda/cuda_module.h) on first use and forward to it, so that a process that never
// asks for CUDA neither maps nor needs the CUDA libraries. When the module cannot be used, they say why
// in one line (Error(Unsupported) / *why), as they do in a build without CUDA; cuda_devices() is empty then.
#include "cuda/cuda.h"
#include "cuda/cuda_module.h"
#include "minigpt/backend.h"
#include "minigpt/error.h"

#ifdef MINIGPT_WITH_CUDA
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#endif

namespace minigpt {

namespace {

#ifdef MINIGPT_WITH_CUDA

#ifndef MINIGPT_CUDA_ABI
#error "MINIGPT_CUDA_ABI must be defined (CMakeLists.txt computes it)"
#endif

// The loaded module's entry points, or why there are none.
struct Module {
  decltype(&minigpt_cuda_available) available = nullptr;
  decltype(&minigpt_cuda_make_backend) make = nullptr;
  decltype(&minigpt_cuda_devices) devices = nullptr;
  std::string error;  // set when the entry points are null
};

// dlerror()'s text, on one line.
std::string dl_error() {
  const char* e = dlerror();
  std::string s = e ? e : "unknown error";
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

std::filesystem::path executable_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  return buf;
}

// The file this code was loaded from: the executable (the CLI), or the shared object that holds the library
// (the Python package's extension module, whose process is python).
std::filesystem::path code_path() {
  const std::filesystem::path exe = executable_path();
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&executable_path), &info) == 0 || info.dli_fname == nullptr ||
      *info.dli_fname == '\0') {
    return exe;
  }
  std::error_code ec;
  const std::filesystem::path object = std::filesystem::canonical(info.dli_fname, ec);
  if (ec || exe.empty() || std::filesystem::equivalent(object, exe, ec)) return exe;
  return object;
}

// Where to look: $MINIGPT_CUDA_MODULE if set (and only there), else beside the executable (or the shared
// object the library is linked into) if it is there, else the dynamic linker's search path. `described`
// names the place for messages.
Module load() {
  Module m;
  std::string path, described;
  const char* env = std::getenv("MINIGPT_CUDA_MODULE");
  if (env != nullptr && *env != '\0') {
    path = env;
    described = "MINIGPT_CUDA_MODULE=" + path;
  } else {
    const std::filesystem::path exe = code_path();
    std::error_code ec;
    const std::filesystem::path beside =
        exe.empty() ? std::filesystem::path() : exe.parent_path() / cuda_module::kFileName;
    if (!beside.empty() && std::filesystem::exists(beside, ec)) {
      path = described = beside.string();
    } else {
      path = cuda_module::kFileName;
      described = path + " (not beside " + (exe.empty() ? std::string("the executable") : exe.string()) +
                  " nor on the library search path; MINIGPT_CUDA_MODULE may name it)";
    }
  }
  const std::string prefix = "cannot load the CUDA backend module " + described + ": ";
  dlerror();
  // Never closed: the CUDA runtime it holds lives until the process exits.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    m.error = prefix + dl_error();
    return m;
  }
  const auto abi = reinterpret_cast<decltype(&minigpt_cuda_abi)>(dlsym(handle, "minigpt_cuda_abi"));
  const auto available =
      reinterpret_cast<decltype(&minigpt_cuda_available)>(dlsym(handle, "minigpt_cuda_available"));
  const auto make =
      reinterpret_cast<decltype(&minigpt_cuda_make_backend)>(dlsym(handle, "minigpt_cuda_make_backend"));
  const auto devices =
      reinterpret_cast<decltype(&minigpt_cuda_devices)>(dlsym(handle, "minigpt_cuda_devices"));
  if (abi == nullptr || available == nullptr || make == nullptr || devices == nullptr) {
    m.error = prefix + "it is not a minigpt CUDA module (it lacks the minigpt_cuda_* entry points)";
    return m;
  }
  const std::string theirs = abi();
  if (theirs != MINIGPT_CUDA_ABI) {
    m.error = prefix + "it was built from another version of minigpt (interface " + theirs +
              ", this program's " + MINIGPT_CUDA_ABI + "); rebuild it with this one";
    return m;
  }
  m.available = available;
  m.make = make;
  m.devices = devices;
  return m;
}

// Loaded once per process (thread-safe); a failure is remembered too.
const Module& module() {
  static const Module m = load();
  return m;
}

#else  // !MINIGPT_WITH_CUDA

constexpr const char* kNoCuda = "this minigpt was built without CUDA (nvcc not found at build time)";

#endif

}  // namespace

bool cuda_available(std::string* why) {
#ifdef MINIGPT_WITH_CUDA
  const Module& m = module();
  if (m.available == nullptr) {
    if (why) *why = m.error;
    return false;
  }
  return m.available(why);
#else
  if (why) *why = kNoCuda;
  return false;
#endif
}

std::shared_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
#ifdef MINIGPT_WITH_CUDA
  const Module& m = module();
  if (m.make == nullptr) throw Error(ErrorKind::Unsupported, m.error);
  std::shared_ptr<Backend> backend;
  m.make(&options, &backend);
  return backend;
#else
  (void)options;
  throw Error(ErrorKind::Unsupported, kNoCuda);
#endif
}

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
#ifdef MINIGPT_WITH_CUDA
  const Module& m = module();
  if (m.devices != nullptr) m.devices(&out);
#endif
  return out;
}

std::shared_ptr<Backend> make_cuda_backend(int device) {
  CudaOptions o;
  o.device = device;
  return make_cuda_backend(o);
}

}  // namespace minigpt
