// `minigpt bench` as a user runs it: the tests it runs, the JSON it prints and the roofline arithmetic in it,
// and one clear line for a bad flag. Timings are never asserted, only that they are there and consistent (and
// that a refused length comes before the seconds-long bandwidth probe).
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cpu/cpu.h"
#include "minigpt/config.h"
#include "minigpt/model.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;

std::string shipped() { return (test::source_dir() / "models" / "shakespeare-char").string(); }

// The cells of line `n` (from 0) of a Markdown table, without the outer bars.
std::vector<std::string> md_cells(const std::string& out, size_t n) {
  std::istringstream in(out);
  std::string line;
  for (size_t i = 0; i <= n; ++i) std::getline(in, line);
  std::vector<std::string> cells;
  if (line.size() < 2 || line.front() != '|' || line.back() != '|') return cells;
  for (size_t at = 1; at < line.size();) {
    const size_t end = line.find('|', at);
    std::string c = line.substr(at, end - at);
    c.erase(0, c.find_first_not_of(' '));
    c.erase(c.find_last_not_of(' ') + 1);
    cells.push_back(c);
    at = end + 1;
  }
  return cells;
}

// The table reads as llama-bench's: model (the file's short name and its type), size, params, backend,
// threads, test, t/s (median ± sd); the decode rows' roofline last. Not the model's path, nor a dtype
// cell of every format and its bits per weight: those are below the table, once, and in -o json.
TEST(BenchCli, MarkdownHasLlamaBenchsColumns) {
  const auto gguf = test::gguf_fixtures() / "gpt2-quant-mix.gguf";
  auto r = test::run_cli("bench -m " + gguf.string() + " -p 4 -n 2 -r 1 -t 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(test::run_cli("bench -m " + gguf.string() + " -p 4 -n 0 -r 1 -t 1 -o json").out);
  const json& x = j.at("results").at(0);
  // llama.cpp's name for the file's type, as `info` reads it (general.file_type); the dtype in full
  // (every format, by bytes, and the bits per weight of the matrices) stays in the JSON.
  const std::string file_type = Model::inspect(gguf).file_type;
  ASSERT_FALSE(file_type.empty());
  EXPECT_EQ(x.at("model_type"), file_type);
  EXPECT_EQ(x.at("model"), gguf.string());
  const std::string dtype = x.at("dtype");
  EXPECT_TRUE(dtype.ends_with(" bpw of the matrices")) << dtype;

  const auto row = md_cells(r.out, 2);
  ASSERT_EQ(row.size(), 8u) << r.out;
  EXPECT_EQ(row[0], "gpt2-quant-mix " + file_type);
  char size[32], params[32];
  std::snprintf(size, sizeof size, "%.2f MiB", x.at("model_size").get<double>() / (1 << 20));
  std::snprintf(params, sizeof params, "%.2f M", x.at("n_params").get<double>() / 1e6);
  EXPECT_EQ(row[1], size);
  EXPECT_EQ(row[2], params);
  EXPECT_EQ(row[3], "cpu");
  EXPECT_EQ(row[4], "1");
  EXPECT_EQ(row[5], "pp4");
  EXPECT_TRUE(std::regex_match(row[6], std::regex("[0-9]+\\.[0-9]{2} ± [0-9]+\\.[0-9]{2}"))) << row[6];
  EXPECT_EQ(md_cells(r.out, 3).at(5), "tg2");
  // The path and the formats, once, below the table.
  EXPECT_NE(r.out.find("\ngpt2-quant-mix " + file_type + ": " + gguf.string() + ", " + dtype + "\n"),
            std::string::npos)
      << r.out;
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(md_cells(r.out, i).front().find('/'), std::string::npos) << r.out;

  // The weights as held: the shipped model's are F32 on the CPU, 4 bytes a parameter and nothing more.
  const json f32 = json::parse(test::run_cli("bench -m " + shipped() + " -p 4 -n 0 -r 1 -t 1 -o json").out);
  EXPECT_EQ(f32["results"][0]["model_size"].get<int64_t>(), 4 * f32["results"][0]["n_params"].get<int64_t>());
  EXPECT_EQ(f32["results"][0]["model_type"], "F32");
}

TEST(BenchCli, JsonHasEveryTestAndConsistentRoofline) {
  auto r = test::run_cli("bench -m " + shipped() + " -p 16 -n 4 -d 0,8 -r 3 -t 1,2 --dtype f32,bf16 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  const json cfg = json::parse(test::read_file(std::filesystem::path(shipped()) / "config.json"));
  const double C = cfg["n_embd"], L = cfg["n_layer"], S = cfg["n_positions"], V = cfg["vocab_size"],
               F = 4 * C;

  const json& m = j.at("machine");
  EXPECT_FALSE(m.at("cpu").get<std::string>().empty());
  EXPECT_GE(m.at("cores").get<int>(), 1);
  EXPECT_EQ(m.at("kernel_level"), cpu_info().kernel_level);  // what CPU figures depend on besides the CPU
  EXPECT_EQ(m.at("blas"), cpu_info().blas);
  for (const char* t : {"1", "2"}) EXPECT_GT(m.at("read_bandwidth_gb_s").at(t).get<double>(), 0.0) << t;

  // 2 thread counts x 2 dtypes x (pp16, pp16@d8, tg4, tg4@d8), in that order: -d applies to prefill too,
  // as llama-bench's pp512 @ d512.
  const json& res = j.at("results");
  ASSERT_EQ(res.size(), 16u) << r.out;
  std::map<std::string, double> bytes;  // "dtype test" -> bytes_per_token
  for (size_t i = 0; i < res.size(); ++i) {
    const json& x = res[i];
    const std::string test = x.at("test"), dtype = x.at("dtype");
    const int threads = x.at("threads");
    EXPECT_EQ(threads, i < 8 ? 1 : 2);
    EXPECT_EQ(dtype, (i % 8) < 4 ? "F32" : "BF16");
    const char* order[] = {"pp16", "pp16@d8", "tg4", "tg4@d8"};
    EXPECT_EQ(test, order[i % 4]);
    EXPECT_EQ(x.at("depth"), test.ends_with("@d8") ? 8 : 0);
    EXPECT_EQ(x.at("backend"), "cpu");
    EXPECT_EQ(x.at("reps"), 3);
    EXPECT_GT(x.at("tok_s").get<double>(), 0.0);
    EXPECT_GE(x.at("tok_s_std").get<double>(), 0.0);
    if (test.starts_with("pp16")) {
      EXPECT_NEAR(x.at("ttft_ms").get<double>(), 16e3 / x.at("tok_s").get<double>(),
                  1e-6 * x.at("ttft_ms").get<double>())
          << "TTFT of the median run (of an odd number) is 16 tokens at the median rate";
      EXPECT_FALSE(x.contains("gb_s"));
      continue;
    }
    // Decode: bytes = weights + the K and V rows read, GB/s = bytes x tok/s, roofline = GB/s / measured.
    const double b = x.at("bytes_per_token"), gbs = x.at("gb_s"), tps = x.at("tok_s");
    EXPECT_NEAR(gbs, b * tps / 1e9, 1e-9 * gbs);
    // The roofline is against the bandwidth measured between this test's repetitions.
    const double bw = x.at("read_bandwidth_gb_s");
    EXPECT_GT(bw, 0.0);
    EXPECT_NEAR(x.at("roofline_pct").get<double>(), 100.0 * gbs / bw, 1e-9 * gbs);
    EXPECT_FALSE(x.contains("roofline_paired_pct")) << "only with --paired-probe";
    EXPECT_LE(x.at("itl_p50_ms").get<double>(), x.at("itl_p99_ms").get<double>());
    EXPECT_GT(x.at("itl_p50_ms").get<double>(), 0.0);
    const std::string key = dtype + " " + test;
    if (threads == 1) {
      bytes[key] = b;
    } else {
      EXPECT_EQ(bytes[key], b) << "bytes per token do not depend on the thread count";
    }
  }
  // The accounting, from the config alone. F32: every weight but wpe (one row of it is read), the tied
  // LM head once. Decode of 4 tokens from depth d reads on average d + 2.5 positions of K and V (F32).
  const double n_params = res[0].at("n_params");
  const double w32 = 4.0 * (n_params - S * C);
  auto kv = [&](double depth) { return 2.0 * L * (depth + 2.5) * C * 4.0; };
  EXPECT_DOUBLE_EQ(bytes["F32 tg4"], w32 + kv(0));
  EXPECT_DOUBLE_EQ(bytes["F32 tg4@d8"], w32 + kv(8));
  // BF16: the matrices (and the LM head) in 2 bytes, the vectors still F32.
  const double matrices = V * C + L * (C * 3 * C + C * C + C * F + F * C);
  EXPECT_DOUBLE_EQ(bytes["BF16 tg4"], w32 - 2.0 * matrices + kv(0));
}

// --paired-probe: every decode row also has the roofline of its steps against reads of the same bytes, each
// taken right after its step: the median of the repetitions' ratios inside their range, from two positive
// rates, and in the markdown notes.
TEST(BenchCli, PairedProbeGivesEachDecodeRowItsPairedRoofline) {
  auto r = test::run_cli("bench -m " + shipped() + " -p 0 -n 4 -d 0,8 -r 3 -t 2 --paired-probe -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json res = json::parse(r.out).at("results");
  ASSERT_EQ(res.size(), 2u) << r.out;
  for (const json& x : res) {
    ASSERT_TRUE(x.contains("roofline_paired_pct")) << x.dump();
    const double pct = x.at("roofline_paired_pct"), lo = x.at("roofline_paired_min_pct"),
                 hi = x.at("roofline_paired_max_pct");
    EXPECT_GT(lo, 0.0);
    EXPECT_LE(lo, pct);
    EXPECT_LE(pct, hi);
    const double dec = x.at("paired_decode_gb_s"), rd = x.at("paired_read_gb_s");
    EXPECT_GT(dec, 0.0);
    EXPECT_TRUE(std::isfinite(rd) && rd > 0.0) << rd;
  }
  auto md = test::run_cli("bench -m " + shipped() + " -p 0 -n 4 -r 1 -t 2 --paired-probe");
  ASSERT_EQ(md.status, 0) << md.err;
  EXPECT_EQ(
      md.out.rfind("| model | size | params | backend | threads | test | t/s | roofline | paired |\n", 0), 0u)
      << md.out;
  const auto row = md_cells(md.out, 2);
  ASSERT_EQ(row.size(), 9u) << md.out;
  EXPECT_TRUE(std::regex_match(row[8], std::regex("[0-9]+%"))) << row[8];
}

TEST(BenchCli, ZeroLengthSkipsATestAndMarkdownHasOneRowPerTest) {
  auto r = test::run_cli("bench -m " + shipped() + " -p 8 -n 0 -r 1 -t 1 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 1u) << r.out;
  EXPECT_EQ(j["results"][0]["test"], "pp8");

  // -t 0: every core, as in the other commands.
  r = test::run_cli("bench -m " + shipped() + " -p 8 -n 0 -r 1 -t 0 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["results"][0]["threads"], j["machine"]["cores"]);

  r = test::run_cli("bench -m " + shipped() + " -p 0 -n 2 -d 0,4 -r 1 -t 1 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u) << r.out;
  EXPECT_EQ(j["results"][0]["test"], "tg2");
  EXPECT_EQ(j["results"][1]["test"], "tg2@d4");

  // Markdown: header, rule, one row per test, a blank line, the model's path and formats, what t/s and size
  // are, the KV-cache line, the machine line, what the roofline is.
  r = test::run_cli("bench -m " + shipped() + " -p 8 -n 2 -r 1 -t 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("| model | size | params | backend | threads | test | t/s | roofline |\n", 0), 0u)
      << r.out;
  EXPECT_NE(r.out.find(" | pp8 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" | tg2 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nshakespeare-char F32: " + shipped() + ", F32\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nt/s: median ± standard deviation of 1 repetition; "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nmachine: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GB/s (1 thread)"), std::string::npos) << r.out;
  EXPECT_EQ(test::line_count(r.out), 10u) << r.out;
  // The decode row has its roofline, the prefill row none.
  EXPECT_EQ(md_cells(r.out, 2).at(7), "") << r.out;
  EXPECT_TRUE(std::regex_match(md_cells(r.out, 3).at(7), std::regex("[0-9]+%"))) << r.out;
  // K and V of every layer's KV heads, F32 on the CPU.
  const Config c = load_config(std::filesystem::path(shipped()) / "config.json");
  EXPECT_NE(r.out.find("\nKV cache: " + std::to_string(2 * c.n_layer * c.kv_dim() * 4) + " bytes per token"),
            std::string::npos)
      << r.out;
  j = json::parse(test::run_cli("bench -m " + shipped() + " -p 0 -n 1 -r 1 -t 1 -o json").out);
  EXPECT_EQ(j["results"][0]["kv_bytes_per_token"].get<int64_t>(), 2 * c.n_layer * c.kv_dim() * 4);
}

// `bench` alone measures the shipped model: -p and -n not given are cut to its context of 128 (the default
// -p 512 failed, "-p: 512 exceeds the model's context of 128", after seconds of bandwidth probing), and the
// output says so. A length given that does not fit is refused before any work.
TEST(BenchCli, DefaultsFitTheModelAndLengthsAreCheckedBeforeAnyWork) {
  auto r = test::run_cli("bench -r 1 -t 1 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("minigpt: bench: -p 128 (the default 512 does not fit the model's context of 128)"),
            std::string::npos)
      << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u) << r.out;
  EXPECT_EQ(j["results"][0]["test"], "pp128");
  EXPECT_EQ(j["results"][1]["test"], "tg128");
  EXPECT_NE(j["results"][0]["model"].get<std::string>().find("shakespeare-char"), std::string::npos);
  // With -d 100, the defaults are cut to the 28 positions left.
  r = test::run_cli("bench -r 1 -t 1 -o json -d 100");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["results"][0]["test"], "pp28@d100");
  EXPECT_EQ(json::parse(r.out)["results"][1]["test"], "tg28@d100");
  // Refused before any work: the bandwidth probes (a 256 MB buffer read between decode repetitions, a 1 GiB
  // pass of seconds) write every byte of their buffers, so a refusal after either would peak above 256 MB
  // resident; before them, the command with the shipped model peaks at a few MB.
  const test::ChildRun c = test::run_minigpt({"bench", "-p", "99999"});
  EXPECT_EQ(c.status, 1) << c.err;
  EXPECT_EQ(c.err, "minigpt: error: -p: 99999 exceeds the model's context of 128\n");
  EXPECT_TRUE(c.out.empty()) << c.out;
  EXPECT_GT(c.max_rss_kb, 0);
  EXPECT_LT(c.max_rss_kb, 200 * 1024)
      << "peaked at " << c.max_rss_kb / 1024 << " MB: the lengths are checked after the bandwidth probe";
}

TEST(BenchCli, BadFlagsAreOneLineAndNothingOnStdout) {
  const std::string m = "bench -m " + shipped() + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {m + "-p 0 -n 0", "every length is 0, nothing to measure"},
      {m + "-p -3", "-p: prompt length -3 must be >= 0"},
      {m + "-n -1", "-n: generation length -1 must be >= 0"},
      {m + "-d -5", "-d: depth -5 must be >= 0"},
      {m + "-r 0", "-r: repetitions must be in [1, 1000]"},
      {m + "-t -1", "-t: thread count -1 must be in [0, 1024] (0 = all cores)"},
      {m + "--dtype f8", "--dtype: f8 not in {f32,f16,bf16,stored}"},
      {m + "-p 99999", "-p: 99999 exceeds the model's context of 128"},
      {m + "-p 8 -n 100 -d 100", "-n/-d: depth 100 + 100 tokens exceed the model's context of 128"},
      {m + "-p 100 -n 0 -d 32", "-p/-d: depth 32 + 100 prompt tokens exceed the model's context of 128"},
      // -b shapes decode steps: with -n 0 it would do nothing.
      {m + "-p 8 -n 0 -b 4", "-b: sequences decoded together apply to decode tests, and -n 0 has none"},
      {m + "-o xml", "--output: xml not in {md,json}"},
      {m + "--random gpt2", "--model excludes --random"},
      // The CPU backend has one device: --device 1 measured the CPU without a word.
      {m + "-p 8 -n 0 --device 1",
       "device 1: the cpu backend has one device, 0 (a GPU needs the cuda backend)"},
  };
  for (const auto& [args, needle] : cases) {
    auto r = test::run_cli(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(test::line_count(r.err), 1u) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("minigpt: error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << ": " << r.err;
  }
  // A shape whose weights cannot fit in memory ended in "out of memory" without a word of why.
  test::TempDir tmp;
  test::write_file(tmp / "huge.json", R"({"model_type":"gpt2","n_embd":65536,"n_head":1,"n_layer":4096,)"
                                      R"("vocab_size":50257,"n_positions":1024})");
  auto r = test::run_cli("bench --random " + (tmp / "huge.json").string() + " -p 8 -n 0 -r 1");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(test::line_count(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("minigpt: error: random model config: its 2.11e+14 parameters take ", 0), 0u)
      << r.err;
  EXPECT_NE(r.err.find(" GB as F32, more than this machine's "), std::string::npos) << r.err;
}

}  // namespace
}  // namespace minigpt

namespace minigpt {
namespace {

// Multi-query attention: the KV cache holds one head per layer, so info and bench report
// 2 x n_layer x head_dim x 4 bytes per token (F32 on the CPU), n_head times less than multi-head.
TEST(BenchCli, MultiQueryKvCacheIsOneHeadPerLayer) {
  const std::string mqa = test::fixture_dir("bigcode-mqa").string();
  const Config c = load_config(test::fixture_dir("bigcode-mqa") / "config.json");
  ASSERT_EQ(c.kv_heads(), 1);
  const int64_t want = 2 * c.n_layer * c.head_dim() * 4;
  auto r = test::run_cli("info -m " + mqa + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["model"]["kv_bytes_per_token"].get<int64_t>(), want) << r.out;
  r = test::run_cli("bench -m " + mqa + " -p 0 -n 1 -r 1 -t 1 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["results"][0]["kv_bytes_per_token"].get<int64_t>(), want) << r.out;
  const Config mha = load_config(test::fixture_dir("bigcode-mha") / "config.json");
  r = test::run_cli("info -m " + test::fixture_dir("bigcode-mha").string() + " --json");
  EXPECT_EQ(json::parse(r.out)["model"]["kv_bytes_per_token"].get<int64_t>(),
            2 * mha.n_layer * mha.n_embd * 4);
}

}  // namespace
}  // namespace minigpt
