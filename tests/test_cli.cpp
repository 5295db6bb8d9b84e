// The CLI as a user meets it: output, and one clear line plus a non-zero exit for every mistake.
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

// Counts the lines of s (a last line without '\n' counts).
size_t line_count(const std::string& s) {
  size_t n = 0;
  for (char ch : s) n += ch == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

TEST(Cli, InfoDescribesAModel) {
  auto r = test::run_cli("info -m " + test::fixture_dir("tiny-untied").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("3 layers, 3 heads, n_embd 48, n_inner 80"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lm head:      separate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("context:      32 tokens"), std::string::npos) << r.out;
}

// info names each special token it prints as the vocabulary spells it, never by a constant: chatml-tiny's
// eos (config.json's eos_token_id) is <|im_end|> and its bos <|endoftext|> (tokenizer.json's added tokens),
// where its tokenizer.json alone would give <|endoftext|> (info printed "eos <|endoftext|> = 0" for a
// model that stops at <|im_end|>). It says where the chat template comes from: the model's
// chat_template.jinja, tokenizer_config.json, or a GGUF file's tokenizer.chat_template (the model as
// `minigpt quantize` writes it), or that there is none.
TEST(Cli, InfoNamesSpecialTokensFromTheVocabularyAndTheChatTemplatesSource) {
  namespace fs = std::filesystem;
  const fs::path dir = test::fixture_dir("chatml-tiny");
  const auto config = nlohmann::json::parse(test::read_file(dir / "config.json"));
  std::map<int64_t, std::string> vocab;  // the added tokens' ids and texts
  const auto tokenizer = nlohmann::json::parse(test::read_file(dir / "tokenizer.json"));
  for (const auto& t : tokenizer["added_tokens"])
    vocab[t["id"].get<int64_t>()] = t["content"].get<std::string>();
  const int64_t bos = config["bos_token_id"], eos = config["eos_token_id"];
  ASSERT_TRUE(vocab.count(bos) && vocab.count(eos));
  ASSERT_NE(vocab[eos], "<|endoftext|>");  // what a constant label would have said
  const std::string bos_eos = "bos / eos:    " + std::to_string(bos) + " " + vocab[bos] + " / " +
                              std::to_string(eos) + " " + vocab[eos] + "\n";
  const std::string tokenizer_eos = ", eos " + vocab[eos] + " = " + std::to_string(eos) + "\n";
  auto r = test::run_cli("info -m " + dir.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(bos_eos), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(tokenizer_eos), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chat template: chat_template.jinja (chat and serve use it)\n"), std::string::npos)
      << r.out;
  r = test::run_cli("info --json -m " + dir.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out)["model"];
  EXPECT_EQ(j["bos_token"], vocab[bos]);
  EXPECT_EQ(j["eos_token"], vocab[eos]);
  EXPECT_EQ(j["tokenizer"]["eos_token"], vocab[eos]);
  EXPECT_EQ(j["tokenizer"]["chat_template_source"], "chat_template.jinja");

  // the template in tokenizer_config.json instead
  test::TempDir tmp;
  const fs::path hf = tmp.path() / "hf";
  fs::create_directories(hf);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) fs::copy_file(dir / f, hf / f);
  auto tc = nlohmann::json::parse(test::read_file(dir / "tokenizer_config.json"));
  tc["chat_template"] = test::read_file(dir / "chat_template.jinja");
  test::write_file(hf / "tokenizer_config.json", tc.dump());
  r = test::run_cli("info -m " + hf.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("chat template: tokenizer_config.json (chat and serve use it)\n"), std::string::npos)
      << r.out;
  // none
  tc.erase("chat_template");
  test::write_file(hf / "tokenizer_config.json", tc.dump());
  r = test::run_cli("info --json -m " + hf.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out)["model"]["tokenizer"]["chat_template_source"].is_null()) << r.out;
  r = test::run_cli("info -m " + hf.string());
  EXPECT_NE(r.out.find("chat template: none (chat and serve's chat endpoint need --chat-template FILE)\n"),
            std::string::npos)
      << r.out;

  // a GGUF file: its tokenizer.ggml ids and tokenizer.chat_template
  const fs::path gguf = tmp.path() / "chatml.gguf";
  r = test::run_cli("quantize " + dir.string() + " " + gguf.string() + " --type q8_0");
  ASSERT_EQ(r.status, 0) << r.err;
  r = test::run_cli("info -m " + gguf.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(tokenizer_eos), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chat template: GGUF tokenizer.chat_template (chat and serve use it)\n"),
            std::string::npos)
      << r.out;
}

TEST(Cli, LoadErrorsAreOneLineAndNonZero) {
  test::TempDir tmp;
  struct Case {
    std::string name;
    std::function<void(const std::filesystem::path&)> make;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"missing dir", [](auto&) {}, ": no such file or directory"},
      {"no config", [](auto& d) { std::filesystem::create_directories(d); }, "no config.json"},
      {"bad json",
       [](auto& d) {
         write_random_model(d, test::tiny_config());
         test::write_file(d / "config.json", "{\"model_type\": ");
       },
       "not valid JSON"},
      {"truncated weights",
       [](auto& d) {
         write_random_model(d, test::tiny_config());
         std::string w = test::read_file(d / "model.safetensors");
         test::write_file(d / "model.safetensors", w.substr(0, w.size() / 2));
       },
       "past the end"},
      // Above 2^63 - 1 an id read as an int64 would be -1 ("no BOS token"), a count a negative number.
      {"an id above 2^63",
       [](auto& d) {
         write_random_model(d, test::tiny_config());
         std::string cfg = test::read_file(d / "config.json");
         cfg.insert(1, "\"bos_token_id\": 18446744073709551615, ");
         test::write_file(d / "config.json", cfg);
       },
       "field 'bos_token_id' = 18446744073709551615 is out of range (above 2^63 - 1)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const auto dir = tmp.path() / "m" / std::to_string(i);
    c.make(dir);
    auto r = test::run_cli("info -m " + dir.string());
    EXPECT_EQ(r.status, 1) << c.name;
    EXPECT_EQ(r.out, "") << c.name;
    EXPECT_EQ(line_count(r.err), 1u) << c.name << ": " << r.err;
    EXPECT_EQ(r.err.rfind("minigpt: error: ", 0), 0u) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.name << ": " << r.err;
  }
}

TEST(Cli, UsageErrors) {
  auto r = test::run_cli("no-such-command");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("no-such-command"), std::string::npos) << r.err;
}

// One rule for every command that takes -m: without it, the shipped model (bench, info and tokenize said
// "give -m"), and --help says so.
TEST(Cli, EveryCommandThatTakesAModelRunsTheShippedOneWithoutM) {
  const std::string m = "-m " + (test::source_dir() / "models" / "shakespeare-char").string();
  auto r = test::run_cli("info");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("shakespeare-char"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("context:      128 tokens"), std::string::npos) << r.out;
  r = test::run_cli("tokenize ROMEO");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, test::run_cli("tokenize " + m + " ROMEO").out);
  r = test::run_cli("bench -p 8 -n 2 -r 1 -t 1 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["results"][0]["model"].get<std::string>().find("shakespeare-char"), std::string::npos) << r.out;
  r = test::run_cli("--help");
  EXPECT_NE(r.out.find("Every command that takes -m runs the shipped model"), std::string::npos) << r.out;
  for (const std::string cmd :
       {"generate", "attention", "perplexity", "serve", "bench", "info", "tokenize"}) {
    r = test::run_cli(cmd + " --help");
    EXPECT_NE(r.out.find("(default: the shipped model, models/shakespeare-char)"), std::string::npos)
        << cmd << ": " << r.out;
  }
}

// The help texts: what minigpt is, each default given, the same words for the same flags in every command.
TEST(Cli, HelpTextsSayWhatMinigptIsAndEachDefault) {
  auto r = test::run_cli("--help");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out.find("GPT-2 inference engine"), std::string::npos) << r.out;
  for (const std::string arch : {"\"gpt2\"", "\"gpt_neox\"", "\"opt\"", "\"gpt_bigcode\"", "\"llama\"",
                                 "\"mistral\"", "\"qwen2\"", "\"qwen3\"", "GGUF", "llm.c", "llama2.c"})
    EXPECT_NE(r.out.find(arch), std::string::npos) << arch << " in: " << r.out;
  EXPECT_NE(r.out.find("Exit status: 0"), std::string::npos) << r.out;
  r = test::run_cli("perplexity --help");
  EXPECT_EQ(r.out.find("{false}"), std::string::npos) << r.out;
  r = test::run_cli("bench --help");
  for (const std::string says : {"(default 512", "(default 128", "(default 5)", "(default md)", "a GGUF file",
                                 "Backend to run on: cpu"})
    EXPECT_NE(r.out.find(says), std::string::npos) << says << " in: " << r.out;
  EXPECT_EQ(r.out.find("Model directory"), std::string::npos) << r.out;
  for (const std::string cmd : {"generate", "attention", "perplexity", "serve"}) {
    r = test::run_cli(cmd + " --help");
    EXPECT_NE(r.out.find("Backend to run on: cpu"), std::string::npos) << cmd;
    EXPECT_NE(r.out.find("CPU threads (default 0 = all cores)"), std::string::npos) << cmd;
  }
}

// One unit per kind and labels that say what was counted: info gives sizes in MiB, as quantize does, and
// bench's bits per weight say they are the matrices' (info's count every tensor, so the two
// differ).
TEST(Cli, SizesAreMiBAndBitsPerWeightSayWhatTheyCount) {
  const std::string gguf =
      (test::source_dir() / "tests" / "fixtures" / "gguf" / "gpt2-quant-mix.gguf").string();
  auto r = test::run_cli("info -m " + gguf);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(" MiB)\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" MB)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" (every tensor as stored: matrices, embeddings, norms, biases)"), std::string::npos)
      << r.out;
  r = test::run_cli("bench -m " + gguf + " -p 4 -n 0 -r 1 -t 1 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string dtype = nlohmann::json::parse(r.out)["results"][0]["dtype"];
  EXPECT_TRUE(dtype.ends_with(" bpw of the matrices")) << dtype;
}

// Model files a new user meets: an empty or cut GGUF file, a folder of GGUF files, a text file that is not
// UTF-8. Each message says what the file is and what to do.
TEST(Cli, ModelAndTextFileMistakesSayWhatToDo) {
  test::TempDir tmp;
  test::write_file(tmp / "zero.gguf", "");
  auto r = test::run_cli("info -m " + (tmp / "zero.gguf").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err,
            "minigpt: error: '" + (tmp / "zero.gguf").string() +
                "' is 0 bytes, too short for a GGUF file, an llm.c or a llama2.c checkpoint (truncated?)\n");
  const std::string gguf =
      test::read_file(test::source_dir() / "tests" / "fixtures" / "gguf" / "gpt2-quant-mix.gguf");
  test::write_file(tmp / "cut.gguf", gguf.substr(0, 1000));
  r = test::run_cli("info -m " + (tmp / "cut.gguf").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("truncated?"), std::string::npos) << r.err;
  std::filesystem::create_directories(tmp / "folder");
  test::write_file(tmp / "folder" / "b-q8_0.gguf", gguf);
  test::write_file(tmp / "folder" / "a-f16.gguf", gguf);
  r = test::run_cli("info -m " + (tmp / "folder").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "minigpt: error: " + (tmp / "folder").string() +
                       ": no config.json, but 2 GGUF files: load one of them (e.g. " +
                       (tmp / "folder" / "a-f16.gguf").string() + ")\n");
  test::write_file(tmp / "garbage.bin", "ab\xc3(");
  r = test::run_cli("tokenize --file " + (tmp / "garbage.bin").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("text (" + (tmp / "garbage.bin").string() + "): "), std::string::npos) << r.err;
}

// A flag given twice is refused in words (CLI11 said "--model: At Most 1 required but received 2").
TEST(Cli, AFlagGivenTwiceSaysSo) {
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"generate -m a -m b", "--model: given 2 times; give it once"},
           {"generate -m a --model b -m c", "--model: given 3 times; give it once"},
           {"generate -m a -n 3 -n 4", "--max-new-tokens: given 2 times; give it once"},
       }) {
    const auto r = test::run_cli(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.err, "minigpt: error: " + says + " (see minigpt --help)\n") << args;
  }
}

// Integer options are decimal numbers within 64 bits. CLI11 read "010" as octal 8 and "0x10" as 16, and a
// number past the range as the type's largest value, silently ("--seed 99999999999999999999" ran with seed
// 18446744073709551615).
TEST(Cli, IntegerOptionsAreDecimalAndInRange) {
  const std::string m = "-m " + (test::source_dir() / "models" / "shakespeare-char").string();
  const auto ten = test::run_cli("generate " + m + " -p hi --temperature 0 -n 10");
  ASSERT_EQ(ten.status, 0) << ten.err;
  for (const std::string n : {"010", "+10", "' 10 '"}) {
    const auto r = test::run_cli("generate " + m + " -p hi --temperature 0 -n " + n);
    EXPECT_EQ(r.status, 0) << n << ": " << r.err;
    EXPECT_EQ(r.out, ten.out) << n;
    EXPECT_NE(r.err.find("generated 10 tokens"), std::string::npos) << n << ": " << r.err;
  }
  const auto max = test::run_cli("generate " + m + " -p hi -n 2 --seed 18446744073709551615");
  EXPECT_EQ(max.status, 0) << max.err;
  EXPECT_NE(max.err.find("seed 18446744073709551615"), std::string::npos) << max.err;
  // Not a decimal integer: the command line cannot be read (exit 2); a decimal integer past the flag's type
  // or range: a refused value (exit 1), as every refused value is.
  const std::vector<std::tuple<std::string, std::string, int>> bad = {
      {"generate " + m + " -p hi -n 2 --seed 18446744073709551616",
       "--seed: 18446744073709551616 is out of range (at most 18446744073709551615)", 1},
      {"generate " + m + " -p hi -n 2 --seed 0x10", "--seed: '0x10' is not a decimal integer", 2},
      {"generate " + m + " -p hi -n 2 --seed -1", "--seed: must be >= 0, got -1", 1},
      {"generate " + m + " -p hi -n 99999999999999999999",
       "--max-new-tokens: 99999999999999999999 is out of range (a 64-bit signed integer)", 1},
      {"generate " + m + " -p hi -n 2 -t 1e0", "--threads: '1e0' is not a decimal integer", 2},
      {"generate " + m + " -p hi -n 2 -t 9999", "--threads: 9999 is outside [0, 1024]", 1},
      {"bench " + m + " -p 9223372036854775808",
       "--n-prompt: 9223372036854775808 is out of range (a 64-bit signed integer)", 1},
      {"perplexity " + m + " -f README.md --chunks 0b1", "--chunks: '0b1' is not a decimal integer", 2},
  };
  for (const auto& [args, says, status] : bad) {
    const auto r = test::run_cli(args);
    EXPECT_EQ(r.status, status) << args << ": " << r.err;
    EXPECT_EQ(r.err, "minigpt: error: " + says + (status == 2 ? " (see minigpt --help)" : "") + "\n") << args;
  }
}

// CLI11 read an empty FLOAT value as 0 (--temperature '' sampled greedily, exit 0) and narrowed doubles to
// float without a word (1e-300 refused as "got 0"). Every FLOAT option takes a decimal number a float holds.
TEST(Cli, FloatOptionsAreDecimalAndFitAFloat) {
  const std::string m = "-m " + (test::source_dir() / "models" / "shakespeare-char").string();
  const std::string base = "generate " + m + " -p hi -n 8 --seed 3 --no-echo";
  const auto half = test::run_cli(base + " --temperature 0.5");
  ASSERT_EQ(half.status, 0) << half.err;
  const auto spaced = test::run_cli(base + " --temperature ' 0.5 '");
  EXPECT_EQ(spaced.status, 0) << spaced.err;
  EXPECT_EQ(spaced.out, half.out);
  const auto tiny = test::run_cli(base + " --top-p 1e-40");  // a subnormal float, > 0: kept
  EXPECT_EQ(tiny.status, 0) << tiny.err;
  // Not a number: exit 2; a number a float cannot hold, or an empty path: a refused value, exit 1.
  const std::vector<std::tuple<std::string, std::string, int>> bad = {
      {" --temperature ''", "--temperature: '' is not a decimal number", 2},
      {" --min-p ' '", "--min-p: ' ' is not a decimal number", 2},
      {" --temperature 0x10", "--temperature: '0x10' is not a decimal number", 2},
      {" --temperature 1.5x", "--temperature: '1.5x' is not a decimal number", 2},
      {" --top-p 1e-300",
       "--top-p: 1e-300 is too small for a 32-bit float (it would be 0; the smallest positive is 1.4e-45)",
       1},
      {" --repetition-penalty 1e300",
       "--repetition-penalty: 1e300 is out of range (a 32-bit float: at most 3.4e38)", 1},
      {" --tokenizer ''", "--tokenizer: the path is empty", 1},
  };
  for (const auto& [flag, says, status] : bad) {
    const auto r = test::run_cli(base + flag);
    EXPECT_EQ(r.status, status) << flag << ": " << r.err;
    EXPECT_EQ(r.err, "minigpt: error: " + says + (status == 2 ? " (see minigpt --help)" : "") + "\n") << flag;
    EXPECT_EQ(r.out, "") << flag;
  }
  // inf and nan are numbers: the option's own check names them.
  const auto inf = test::run_cli(base + " --temperature inf");
  EXPECT_EQ(inf.status, 1);
  EXPECT_EQ(inf.err, "minigpt: error: temperature: must be a finite number >= 0 (0 = greedy), got inf\n");
}

// Mistakes a user makes on the command line, each answered with one clear line.
TEST(Cli, AuditedMistakesAreOneClearLine) {
  test::TempDir tmp;
  const auto shipped = test::source_dir() / "models" / "shakespeare-char";
  const std::string m = "-m " + shipped.string();
  // A NUL quoted from the user's input ended the message at that byte ("--decode: \"a").
  test::write_file(tmp / "nul.txt", std::string("a\0b", 3));
  auto r = test::run_cli("tokenize " + m + " --decode --file " + (tmp / "nul.txt").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(
      r.err,
      "minigpt: error: --decode: \"a\\x00b\" (id #1, byte offset 0) is not a token id (a decimal integer "
      "from 0 to 2147483647)\n");
  // A --tokenizer far smaller than the model's vocabulary (another model's): every token decoded to "".
  auto big = tmp / "big";
  Config c = test::tiny_config();
  c.n_vocab = 2000;
  write_random_model(big, c);
  r = test::run_cli("generate -m " + big.string() + " --tokenizer " + shipped.string() + " -p hi -n 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(
      r.err,
      "minigpt: error: " + shipped.string() +
          ": the tokenizer has 256 tokens, 1744 fewer than the model's vocabulary of 2000 (vocab_size): "
          "it is not this model's tokenizer\n");
  // --device on the CPU backend: generate refused it, bench measured the CPU without a word.
  r = test::run_cli("bench " + m + " -p 8 -n 0 -r 1 --device 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err,
            "minigpt: error: device 1: the cpu backend has one device, 0 (a GPU needs the cuda backend)\n");
  EXPECT_EQ(r.out, "");
  // A path that is not UTF-8 in --json output (nlohmann's dump throws on it): its bytes are written as
  // U+FFFD, as generate --json writes text.
  const auto odd = tmp / std::string("m\xff");
  std::filesystem::copy(shipped, odd);
  r = test::run_cli("info --json -m '" + odd.string() + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  const auto info = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(info.is_object()) << r.out;
  EXPECT_NE(r.out.find("m\xef\xbf\xbd"), std::string::npos) << r.out;
  r = test::run_cli("bench -o json -p 8 -n 0 -r 1 -m '" + odd.string() + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out, nullptr, false).is_object()) << r.out;
  // serve --host '' listened on [::1] as "http://:PORT".
  r = test::run_cli("serve " + m + " --host ''");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err,
            "minigpt: error: --host: the host is empty (127.0.0.1: this machine only; 0.0.0.0: every "
            "interface)\n");
}

}  // namespace
}  // namespace minigpt
