// The backend registry (minigpt/registry.h), the CLI's --backend through it, and `minigpt info`: --system
// (what this build and machine offer) and -m (a model directory, read from its headers only).
#include <nlohmann/json.hpp>

#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "cuda/cuda.h"
#include "minigpt/model.h"
#include "minigpt/registry.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

size_t line_count(const std::string& s) {
  size_t n = 0;
  for (char ch : s) n += ch == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

std::string known_names() {
  std::string s;
  for (const BackendInfo& b : backends()) s += (s.empty() ? "" : ", ") + b.name;
  return s;
}

TEST(Registry, ListsCpuFirstAndItIsAvailable) {
  const auto& list = backends();
  ASSERT_FALSE(list.empty());
  EXPECT_EQ(list[0].name, "cpu");
  std::string why = "untouched";
  EXPECT_TRUE(list[0].available(&why));
  EXPECT_FALSE(list[0].description.empty());
  const auto devices = list[0].devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_NE(devices[0].find(cpu_info().kernel_level), std::string::npos) << devices[0];
  // Built once: the same objects every time.
  EXPECT_EQ(&backends(), &list);
  EXPECT_EQ(find_backend("cpu"), &list[0]);
  ASSERT_NE(find_backend("cuda"), nullptr);
  EXPECT_EQ(find_backend("cuda")->name, "cuda");
  EXPECT_EQ(find_backend("tpu"), nullptr);
  EXPECT_EQ(find_backend(""), nullptr);
  // Names are unique, every entry is complete.
  for (size_t i = 0; i < list.size(); ++i) {
    EXPECT_TRUE(list[i].available && list[i].create && list[i].devices) << list[i].name;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(list[i].name, list[j].name);
  }
}

TEST(Registry, MakesTheCpuBackend) {
  BackendOptions o;
  o.n_threads = 1;
  auto b = make_backend("cpu", o);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->device(), Device::Host);
  EXPECT_EQ(b->n_threads(), 1);
}

// The CPU backend has one device: another index is refused (not run on the CPU without a word, a user meaning
// --backend cuda --device 1 none the wiser).
TEST(Registry, TheCpuBackendHasOneDevice) {
  BackendOptions o;
  o.n_threads = 1;
  o.device = 1;
  test::expect_error([&] { make_backend("cpu", o); }, ErrorKind::Argument,
                     {"device 1: the cpu backend has one device, 0 (a GPU needs the cuda backend)"});
  const auto r = test::run_cli("generate --device 2 -p x --max-new-tokens 1");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err,
            "minigpt: error: device 2: the cpu backend has one device, 0 (a GPU needs the cuda backend)\n");
}

TEST(Registry, UnknownNameIsAnArgumentErrorNamingTheKnownOnes) {
  test::expect_error([] { make_backend("tpu"); }, ErrorKind::Argument,
                     {"unknown backend 'tpu' (this build has: " + known_names() + ")", "cpu", "cuda"});
  test::expect_error([] { make_backend("CPU"); }, ErrorKind::Argument, {"unknown backend 'CPU'"});
}

// With a usable GPU "cuda" makes a backend.
TEST(Registry, CudaMakesABackendWithADevice) {
  const BackendInfo* cuda = find_backend("cuda");
  ASSERT_NE(cuda, nullptr);
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  std::string why2;
  EXPECT_TRUE(cuda->available(&why2)) << why2;
  auto b = make_backend("cuda");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->device(), Device::Cuda);
  EXPECT_FALSE(cuda->devices().empty());
}

// Without one (or without CUDA in this build) it is an Error(Unsupported) whose message is the probe's
// reason, word for word.
TEST(Registry, CudaWithoutADeviceGivesTheProbesReason) {
  const BackendInfo* cuda = find_backend("cuda");
  ASSERT_NE(cuda, nullptr);
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a CUDA device is available: the no-device error cannot be seen";
  std::string why2;
  EXPECT_FALSE(cuda->available(&why2));
  EXPECT_EQ(why2, why);
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(cuda->devices().empty());
  try {
    make_backend("cuda");
    ADD_FAILURE() << "make_backend(\"cuda\") succeeded although cuda_available() said: " << why;
  } catch (const Error& e) {
    EXPECT_EQ(int(e.kind()), int(ErrorKind::Unsupported)) << e.what();
    EXPECT_EQ(std::string(e.what()), why);
  }
}

// The CLI takes --backend from the registry: an unknown name is a one-line usage error listing them.
TEST(Registry, CliBackendFlagTakesTheRegistrysNames) {
  auto r = test::run_cli("generate --backend tpu -p x --max-new-tokens 1");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("unknown backend 'tpu' (this build has: " + known_names() + ")"), std::string::npos)
      << r.err;

  r = test::run_cli("generate --backend cpu -t 1 -p x --max-new-tokens 2 --seed 1");
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(InfoCli, SystemSaysWhatThisBuildAndMachineOffer) {
  const CpuInfo cpu = cpu_info();
  auto r = test::run_cli("info --system");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("minigpt:      minigpt "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kernels:      " + cpu.kernel_level + " "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(cpu.model), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blas:         "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  cpu    available "), std::string::npos) << r.out;
  std::string why;
  if (cuda_available(&why)) {
    EXPECT_NE(r.out.find("\n  cuda   available "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("device 0: "), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find("\n  cuda   unavailable "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
  }
  // The kernel level it reports is the one the environment forces; so are OpenBLAS's kernels, and it says
  // that the environment chose them.
  auto forced = test::run_minigpt({"info", "--system"}, {"MINIGPT_CPU=generic", "OPENBLAS_CORETYPE=Haswell"});
  ASSERT_EQ(forced.status, 0) << forced.err;
  EXPECT_NE(forced.out.find("kernels:      generic "), std::string::npos) << forced.out;
  EXPECT_NE(forced.out.find(" Haswell "), std::string::npos) << forced.out;
  EXPECT_NE(forced.out.find(" (OPENBLAS_CORETYPE=Haswell)\n"), std::string::npos) << forced.out;
}

// Prefill's product of unquantized weights: minigpt's AVX-512 GEMM or OpenBLAS's sgemm (MINIGPT_SGEMM, else
// chosen from OpenBLAS's kernels); both give the shipped model's perplexity (F32, and F16 widened) to F32
// rounding, and info says which runs. Where the level has no GEMM of its own, asking for it is one line.
TEST(CpuGemm, MinigptsAndOpenBlasGiveTheSamePerplexity) {
  test::TempDir tmp;
  const std::string text =
      test::read_file(test::source_dir() / "tests" / "fixtures" / "data" / "tinyshakespeare.txt");
  test::write_file(tmp / "t.txt", text.substr(0, 3000));
  const std::string shipped = (test::source_dir() / "models" / "shakespeare-char").string();
  const std::string f16 = (tmp / "f16.gguf").string();
  ASSERT_EQ(test::run_cli("convert " + shipped + " " + f16 + " --outtype f16").status, 0);
  const bool own = cpu::fgemm_available();
  for (const std::string& m : {shipped, f16}) {
    const std::vector<std::string> args = {
        "perplexity", "-m", m, "-f", (tmp / "t.txt").string(), "--json", "--no-progress", "-t", "2"};
    const auto blas = test::run_minigpt(args, {"MINIGPT_SGEMM=openblas"});
    ASSERT_EQ(blas.status, 0) << blas.err;
    const auto ours = test::run_minigpt(args, {"MINIGPT_SGEMM=minigpt"});
    if (!own) {
      EXPECT_EQ(ours.status, 1);
      EXPECT_NE(ours.err.find("MINIGPT_SGEMM=minigpt: the kernel level " + cpu_info().kernel_level +
                              " has no GEMM of its own (it needs AVX-512)"),
                std::string::npos)
          << ours.err;
      continue;
    }
    ASSERT_EQ(ours.status, 0) << ours.err;
    const double a = nlohmann::json::parse(blas.out)["nll_mean"],
                 b = nlohmann::json::parse(ours.out)["nll_mean"];
    // 1449 scored tokens' F32 log-probabilities, each product summed in another order: ~1e-7 apart here
    EXPECT_NEAR(a, b, 1e-5 * a) << m;
  }
  const auto info = test::run_minigpt({"info", "--system"}, {"MINIGPT_SGEMM=openblas"});
  EXPECT_NE(info.out.find("gemm:         OpenBLAS's sgemm"), std::string::npos) << info.out;
  if (own) {
    // OpenBLAS's AVX2 kernels on an AVX-512 CPU: ours; its AVX-512 ones: its own
    auto r = test::run_minigpt({"info", "--system"}, {"MINIGPT_SGEMM=", "OPENBLAS_CORETYPE=Haswell"});
    EXPECT_NE(r.out.find("gemm:         minigpt's (" + cpu_info().kernel_level + ")"), std::string::npos)
        << r.out;
    r = test::run_minigpt({"info", "--system"}, {"MINIGPT_SGEMM=", "OPENBLAS_CORETYPE=SkylakeX"});
    EXPECT_NE(r.out.find("gemm:         OpenBLAS's sgemm"), std::string::npos) << r.out;
  }
  const auto bad = test::run_minigpt({"info", "--system"}, {"MINIGPT_SGEMM=mkl"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("MINIGPT_SGEMM='mkl': minigpt or openblas"), std::string::npos) << bad.err;
}

// info --system says how BF16 weights are multiplied, and MINIGPT_BF16_MATH chooses it (bf16 only where the
// level has the BF16 kernels).
TEST(InfoCli, SystemSaysTheBf16Math) {
  auto r = test::run_minigpt({"info", "--system"}, {"MINIGPT_BF16_MATH=f32"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("bf16 math:    f32 (BF16 weights multiplied in F32, widened;"), std::string::npos)
      << r.out;
  r = test::run_minigpt({"info", "--system"}, {"MINIGPT_BF16_MATH=bf16"});
  if (!cpu::bf16_available()) {
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("MINIGPT_BF16_MATH=bf16: the kernel level"), std::string::npos) << r.err;
    GTEST_SKIP() << "the kernel level " << cpu_info().kernel_level << " has no BF16 arithmetic";
  }
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("bf16 math:    bf16 (BF16 weights multiplied in BF16 arithmetic;"), std::string::npos)
      << r.out;
}

// --bf16-math, on every command that loads a model (here the shipped model's weights made BF16 at load):
// f32 runs anywhere; bf16 is one clear line where the kernel level has no BF16 arithmetic; another value is
// refused by name.
TEST(Bf16MathCli, ChoosesHowBf16WeightsAreMultiplied) {
  auto r = test::run_minigpt(
      {"generate", "--dtype", "bf16", "-p", "Hello", "-n", "2", "--temperature", "0", "--bf16-math", "f32"});
  EXPECT_EQ(r.status, 0) << r.err;
  r = test::run_minigpt({"generate", "--dtype", "bf16", "-p", "Hello", "-n", "2", "--bf16-math", "half"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--bf16-math"), std::string::npos) << r.err;
  r = test::run_minigpt(
      {"generate", "--dtype", "bf16", "-p", "Hello", "-n", "2", "--temperature", "0", "--bf16-math", "bf16"});
  if (!cpu::bf16_available()) {
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("bf16_math bf16: the kernel level"), std::string::npos) << r.err;
    GTEST_SKIP() << "the kernel level " << cpu_info().kernel_level << " has no BF16 arithmetic";
  }
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(InfoCli, SystemAsJson) {
  const CpuInfo cpu = cpu_info();
  auto r = test::run_cli("info --system --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j.contains("model"));
  const auto& s = j.at("system");
  EXPECT_EQ(s.at("cpu").at("kernel_level"), cpu.kernel_level);
  EXPECT_EQ(s.at("cpu").at("threads"), cpu.cores);
  EXPECT_EQ(s.at("cpu").at("levels").get<std::vector<std::string>>(), cpu.levels);
  EXPECT_EQ(s.at("cpu").at("bf16_math"), cpu::bf16_math() ? "bf16" : "f32");
  ASSERT_GE(s.at("backends").size(), 2u);
  EXPECT_EQ(s.at("backends")[0].at("name"), "cpu");
  EXPECT_EQ(s.at("backends")[0].at("available"), true);
  EXPECT_EQ(s.at("backends")[1].at("name"), "cuda");
  EXPECT_EQ(s.at("backends")[1].at("available"), cuda_available());
}

// Without -m or --system: the shipped model, as every command that takes -m.
TEST(InfoCli, NeitherModelNorSystemShowsTheShippedModel) {
  auto r = test::run_cli("info");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("model:        ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("shakespeare-char"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("cpu features:"), std::string::npos) << r.out;
}

// The parameter count info reports is the one Model::load counts.
TEST(InfoCli, ModelReportsTheParametersLoadCounts) {
  const auto dir = test::fixture_dir("tiny-untied");
  const int64_t n = Model::load(dir, LoadOptions::threads(1))->n_params();
  auto r = test::run_cli("info -m " + dir.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("parameters:   " + std::to_string(n) + " "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("architecture: gpt2 ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kv heads:     3 (multi-head)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("positions:    learned"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("residual:     sequential"), std::string::npos) << r.out;

  r = test::run_cli("info --json -m " + dir.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j.contains("system"));
  EXPECT_EQ(j.at("model").at("n_params"), n);
  EXPECT_EQ(j.at("model").at("arch"), "gpt2");
  EXPECT_EQ(j.at("model").at("n_kv_head"), 3);
  EXPECT_EQ(j.at("model").at("positions"), "learned");
  EXPECT_EQ(j.at("model").at("residual"), "sequential");
}

// info -m reads config.json and the weight files' headers, not the weights: a 124M-parameter F32 model
// (498 MB of weights) is described in a few MB (Model::load would peak near 1 GB).
TEST(InfoCli, ModelReadsHeadersOnly) {
#ifdef MINIGPT_TEST_ASAN
  // The sanitizers' runtime and shadow memory (see VersionRunsSmall), and the libraries the binary maps
  // (Pango and fontconfig, xgrammar): measured 143 MB; loading the weights would add 498 MB.
  constexpr long kBoundKb = 200 * 1024;
#else
  constexpr long kBoundKb = 50 * 1024;
#endif
  test::TempDir tmp;
  const Config c = gpt2_preset("gpt2");
  write_random_model(tmp.path(), c, DType::F32);
  int64_t expected = 0;
  for (const RandomTensor& t : random_tensors(c)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    expected += n;
  }
  const test::ChildRun r = test::run_minigpt({"info", "-m", tmp.path().string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("parameters:   " + std::to_string(expected) + " "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("12 layers, 12 heads, n_embd 768, n_inner 3072"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("weights F32:  " + std::to_string(expected * 4) + " bytes"), std::string::npos)
      << r.out;
  EXPECT_GT(r.max_rss_kb, 0);
  EXPECT_LT(r.max_rss_kb, kBoundKb) << "minigpt info -m peaked at " << r.max_rss_kb / 1024 << " MB";
  std::printf("minigpt info -m (124M F32 model) peak RSS: %ld KB\n", r.max_rss_kb);
}

}  // namespace
}  // namespace minigpt
