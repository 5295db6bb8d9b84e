// tokenizer.json's post_processor: the special tokens `tokenizers` adds around the text with
// add_special_tokens=True (a TemplateProcessing's BOS / EOS), applied by encode_with_specials(), the
// `tokenize` command and `generate`'s prompt, or refused in one line. Golden ids from `tokenizers` itself:
// tools/reference/make_postprocessor_reference.py -> tests/fixtures/tokenizer/postprocessor/.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "minigpt/generate.h"
#include "minigpt/tokenizer.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;

const std::filesystem::path kPostDir =
    test::source_dir() / "tests" / "fixtures" / "tokenizer" / "postprocessor";

json golden() { return json::parse(test::read_file(kPostDir / "golden.json")); }
std::vector<int32_t> golden_ids(const json& j) { return j.get<std::vector<int32_t>>(); }

std::string joined(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

size_t count_lines(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }

// The bos fixture's tokenizer.json with its post_processor replaced.
std::string with_post_processor(const json& pp) {
  json j = json::parse(test::read_file(kPostDir / "bos" / "tokenizer.json"));
  j["post_processor"] = pp;
  return j.dump();
}

const json kA = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
json special_piece(const std::string& name) { return {{"SpecialToken", {{"id", name}, {"type_id", 0}}}}; }
json template_of(const json& single, const json& special_tokens) {
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", json::array({kA})},
          {"special_tokens", special_tokens}};
}
const json kBosSpecials = {{"<s>", {{"id", "<s>"}, {"ids", {557}}, {"tokens", {"<s>"}}}}};

TEST(TokenizerPostProcessor, IdsMatchTokenizersWithAndWithoutSpecialTokens) {
  const json g = golden();
  size_t checked = 0;
  for (const json& fx : g["fixtures"]) {
    const std::string dir = fx["dir"];
    if (dir == "bert") continue;  // refused, see UnsupportedProcessorsAreRefused
    const Tokenizer tok = Tokenizer::load(kPostDir / dir);
    for (const json& c : fx["cases"]) {
      const std::string text = c["text"];
      // tokenizers always recognises added tokens in the text: allow_special = true.
      EXPECT_EQ(tok.encode_with_specials(text, true), golden_ids(c["ids_add"])) << dir << ": " << text;
      EXPECT_EQ(tok.encode(text, true), golden_ids(c["ids_raw"])) << dir << ": " << text;
      EXPECT_EQ(tok.add_special_tokens(tok.encode(text, true)), golden_ids(c["ids_add"]))
          << dir << ": " << text;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 5u * 8u);  // bos, eos, both, bytelevel_template, GPT-2
}

TEST(TokenizerPostProcessor, TemplateSpecialTokens) {
  using V = std::vector<int32_t>;
  auto prefix = [](const Tokenizer& t) { return V(t.special_prefix().begin(), t.special_prefix().end()); };
  auto suffix = [](const Tokenizer& t) { return V(t.special_suffix().begin(), t.special_suffix().end()); };
  const Tokenizer bos = Tokenizer::load(kPostDir / "bos"), eos = Tokenizer::load(kPostDir / "eos"),
                  both = Tokenizer::load(kPostDir / "both"),
                  llama3 = Tokenizer::load(kPostDir / "bytelevel_template");
  EXPECT_EQ(prefix(bos), V{557});
  EXPECT_EQ(suffix(bos), V{});
  EXPECT_EQ(prefix(eos), V{});
  EXPECT_EQ(suffix(eos), V{558});
  EXPECT_EQ(prefix(both), V{557});
  EXPECT_EQ(suffix(both), (V{558, 556}));  // one template token standing for two ids
  EXPECT_EQ(prefix(llama3), V{559});
  EXPECT_EQ(bos.encode_with_specials(""), V{557});
  EXPECT_EQ(bos.encode(""), V{});
  // GPT-2 (ByteLevel post_processor), vocab.json + merges.txt and the built-in byte level: no template.
  for (const Tokenizer& t :
       {Tokenizer::load(test::source_dir() / "tests" / "fixtures" / "gpt2-tokenizer"),
        Tokenizer::load(test::source_dir() / "tests" / "fixtures" / "tokenizer" / "bytelevel"),
        Tokenizer::byte_level()}) {
    EXPECT_TRUE(t.special_prefix().empty());
    EXPECT_TRUE(t.special_suffix().empty());
    EXPECT_EQ(t.encode_with_specials("Hello world"), t.encode("Hello world"));
  }
}

TEST(TokenizerPostProcessor, AcceptedShapes) {
  using V = std::vector<int32_t>;
  const json bl = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  const json tpl = template_of({special_piece("<s>"), kA, special_piece("<s>")}, kBosSpecials);
  const json inner = {{"type", "Sequence"}, {"processors", json::array({tpl})}};
  struct Case {
    const char* what;
    json pp;
    V want;
  };
  const V raw = Tokenizer::load(kPostDir / "bos").encode("Hello world");
  V wrapped = {557};
  wrapped.insert(wrapped.end(), raw.begin(), raw.end());
  wrapped.push_back(557);
  for (const Case& c : std::vector<Case>{
           {"null", json(), raw},
           {"ByteLevel", bl, raw},
           {"empty Sequence", {{"type", "Sequence"}, {"processors", json::array()}}, raw},
           {"template", tpl, wrapped},
           {"Sequence[ByteLevel, template, ByteLevel]",
            {{"type", "Sequence"}, {"processors", {bl, tpl, bl}}},
            wrapped},
           {"nested Sequence", {{"type", "Sequence"}, {"processors", json::array({inner})}}, wrapped},
           {"template without pair",
            {{"type", "TemplateProcessing"},
             {"single", json::array({kA})},
             {"special_tokens", json::object()}},
            raw},
       }) {
    const Tokenizer t = Tokenizer::from_tokenizer_json(with_post_processor(c.pp));
    EXPECT_EQ(t.encode_with_specials("Hello world"), c.want) << c.what;
    EXPECT_EQ(t.encode("Hello world"), raw) << c.what;
  }
  json absent = json::parse(test::read_file(kPostDir / "bos" / "tokenizer.json"));
  absent.erase("post_processor");
  EXPECT_EQ(Tokenizer::from_tokenizer_json(absent.dump()).encode_with_specials("Hello world"), raw);
}

TEST(TokenizerPostProcessor, MalformedTemplateIsAOneLineFormatError) {
  const std::string src = "/some/dir/tokenizer.json";
  json two_ids = kBosSpecials;
  two_ids["<s>"]["ids"] = {557, "x"};
  json unknown_id = kBosSpecials;
  unknown_id["<s>"]["ids"] = {99999};
  json negative_id = kBosSpecials;
  negative_id["<s>"]["ids"] = {-1};
  json no_ids = kBosSpecials;
  no_ids["<s>"].erase("ids");
  json no_single = template_of({kA}, kBosSpecials);
  no_single.erase("single");
  const json b = {{"Sequence", {{"id", "B"}, {"type_id", 1}}}};
  for (const auto& [pp, needle] : std::vector<std::pair<json, std::string>>{
           {template_of({special_piece("<bos>"), kA}, kBosSpecials),
            "special token \"<bos>\", which special_tokens lacks"},
           {template_of({special_piece("a\nb"), kA}, kBosSpecials), "special token \"a\\nb\""},
           {template_of({special_piece("<s>"), kA}, two_ids),
            "special_tokens[\"<s>\"].ids holds \"x\", not an integer"},
           {template_of({special_piece("<s>"), kA}, unknown_id),
            "special token \"<s>\" has id 99999, which no token has"},
           {template_of({special_piece("<s>"), kA}, negative_id),
            "special token \"<s>\" has id -1, which no token has"},
           {template_of({special_piece("<s>"), kA}, no_ids), "special_tokens[\"<s>\"] has no \"ids\" list"},
           {template_of({special_piece("<s>"), kA}, json::array()), "\"special_tokens\" is not an object"},
           {template_of(json::array({special_piece("<s>")}), kBosSpecials), "0 sequences A, not exactly one"},
           {template_of({kA, special_piece("<s>"), kA}, kBosSpecials), "2 sequences A, not exactly one"},
           {template_of({special_piece("<s>"), b}, kBosSpecials),
            "piece 1 of the single template is sequence \"B\""},
           {template_of({{{"Text", "hi"}}, kA}, kBosSpecials), "piece 0 of the single template is neither"},
           {template_of(json::array({"<s>", kA}), kBosSpecials), "piece 0 of the single template is neither"},
           {template_of({{{"SpecialToken", {{"id", "<s>"}}}}, kA}, kBosSpecials),
            "lacks a string \"id\" or a non-negative integer \"type_id\""},
           {template_of(json::array({json{{"Sequence", {{"id", 0}, {"type_id", 0}}}}}), kBosSpecials),
            "lacks a string \"id\""},
           {template_of("<s> $A", kBosSpecials), "\"single\" is not a list of pieces"},
           {no_single, "\"single\" is not a list of pieces"},
           {json(42), "post_processor is not an object with a string \"type\""},
           {json::object(), "post_processor is not an object with a string \"type\""},
           {{{"type", "Sequence"}, {"processors", "ByteLevel"}}, "\"processors\" is not a list"},
       }) {
    try {
      Tokenizer::from_tokenizer_json(with_post_processor(pp), src);
      ADD_FAILURE() << "accepted: " << pp.dump();
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(int(e.kind()), int(ErrorKind::Format)) << msg;
      EXPECT_EQ(msg.rfind(src + ": post_processor", 0), 0u) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(TokenizerPostProcessor, UnsupportedProcessorsAreRefused) {
  const std::string bert_path = (kPostDir / "bert" / "tokenizer.json").string();
  test::expect_error([&] { Tokenizer::load(kPostDir / "bert"); }, ErrorKind::Unsupported,
                     {bert_path + ": post_processor 'BertProcessing' is not supported"});
  const json bl = {{"type", "ByteLevel"}};
  const json tpl = template_of({special_piece("<s>"), kA}, kBosSpecials);
  const json roberta = {{"type", "RobertaProcessing"},
                        {"sep", json::array({"</s>", 558})},
                        {"cls", json::array({"<s>", 557})},
                        {"trim_offsets", true},
                        {"add_prefix_space", true}};
  for (const auto& [pp, needle] : std::vector<std::pair<json, std::string>>{
           {roberta, "post_processor 'RobertaProcessing' is not supported"},
           {{{"type", "Sequence"}, {"processors", {bl, roberta}}},
            "post_processor 'RobertaProcessing' is not supported"},
           {{{"type", "SomethingNew"}}, "post_processor 'SomethingNew' is not supported"},
           // tokenizers would hand the second template the first one's pieces as a pair: refused.
           {{{"type", "Sequence"}, {"processors", {tpl, tpl}}}, "more than one TemplateProcessing"},
       }) {
    test::expect_error([&] { Tokenizer::from_tokenizer_json(with_post_processor(pp), "x/tokenizer.json"); },
                       ErrorKind::Unsupported, {"x/tokenizer.json: ", needle});
  }
}

// --- the CLI ---------------------------------------------------------------------------------------

std::vector<int32_t> golden_ids(const std::string& dir, const std::string& text, const char* key) {
  const json g = golden();  // not in the range-for: a temporary's member would dangle
  for (const json& fx : g["fixtures"])
    if (fx["dir"] == dir)
      for (const json& c : fx["cases"])
        if (c["text"] == text) return golden_ids(c[key]);
  ADD_FAILURE() << "no golden case " << dir << " / " << text;
  return {};
}

std::string m(const std::string& dir) { return "tokenize -m '" + (kPostDir / dir).string() + "' "; }

TEST(TokenizerPostProcessor, TokenizeCliAddsTheTemplateUnlessNoAddSpecial) {
  for (const char* dir : {"bos", "eos", "both", "bytelevel_template"}) {
    for (const char* text : {"Hello world", "the quick brown fox jumps over the lazy dog\n"}) {
      auto r = test::run_cli(m(dir), text);  // from stdin
      ASSERT_EQ(r.status, 0) << r.err;
      EXPECT_EQ(r.out, joined(golden_ids(dir, text, "ids_add")) + "\n") << dir;
      r = test::run_cli(m(dir) + "--no-add-special", text);
      ASSERT_EQ(r.status, 0) << r.err;
      EXPECT_EQ(r.out, joined(golden_ids(dir, text, "ids_raw")) + "\n") << dir;
    }
  }
  auto j = test::run_cli(m("bos") + "--json 'Hello world'");
  ASSERT_EQ(j.status, 0) << j.err;
  const json out = json::parse(j.out);
  EXPECT_EQ(golden_ids(out["ids"]), golden_ids("bos", "Hello world", "ids_add"));
  EXPECT_EQ(out["tokens"][0], "<s>");
  // Special tokens in the text still need --special; the template is added either way.
  auto s = test::run_cli(m("eos") + "--special 'a<s>b</s>c'");
  EXPECT_EQ(s.out, joined(golden_ids("eos", "a<s>b</s>c", "ids_add")) + "\n");
  // GPT-2: nothing changes.
  auto g = test::run_cli("tokenize -m '" +
                         (test::source_dir() / "tests" / "fixtures" / "gpt2-tokenizer").string() +
                         "' 'Hello world'");
  EXPECT_EQ(g.out, "15496 995\n");
}

TEST(TokenizerPostProcessor, TokenizeCliErrorsAreOneLineNamingTheFile) {
  auto r = test::run_cli(m("bert") + "hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("minigpt: error: " + (kPostDir / "bert" / "tokenizer.json").string() +
                       ": post_processor 'BertProcessing' is not supported"),
            std::string::npos)
      << r.err;

  test::TempDir tmp;
  test::write_file(tmp / "tokenizer.json",
                   with_post_processor(template_of({special_piece("<bos>"), kA}, kBosSpecials)));
  r = test::run_cli("tokenize -m '" + tmp.path().string() + "' hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find((tmp / "tokenizer.json").string() + ": post_processor TemplateProcessing: "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("\"<bos>\", which special_tokens lacks"), std::string::npos) << r.err;
}

TEST(TokenizerPostProcessor, GeneratePromptGetsTheTemplate) {
  test::TempDir tmp;
  const auto dir = tmp / "model";
  Config c = test::tiny_config();
  c.n_vocab = 561;  // the fixture's 556 tokens + 5 added
  c.bos_token_id = 556;
  write_random_model(dir, c);
  std::filesystem::copy_file(kPostDir / "bos" / "tokenizer.json", dir / "tokenizer.json");
  const std::string args =
      "generate -m '" + dir.string() + "' --max-new-tokens 3 --temperature 0 --ignore-eos --json ";

  // The token lines' ids, and the summary.
  auto run = [&](const std::string& more) {
    auto r = test::run_cli(args + more);
    EXPECT_EQ(r.status, 0) << r.err;
    std::istringstream lines(r.out);
    std::string line;
    std::vector<int32_t> ids;
    json summary;
    while (std::getline(lines, line)) {
      const json j = json::parse(line);
      if (j.contains("summary"))
        summary = j["summary"];
      else
        ids.push_back(j["id"].get<int32_t>());
    }
    return std::make_pair(ids, summary);
  };
  const auto [ids, summary] = run("-p 'Hello world'");
  const std::vector<int32_t> prompt = golden_ids("bos", "Hello world", "ids_add");  // <s> first
  ASSERT_TRUE(summary.is_object());
  EXPECT_EQ(summary["prompt_tokens"], prompt.size());
  // The same tokens as the library generates from the templated prompt.
  auto model = Model::load(dir, LoadOptions::threads(1));
  const Tokenizer tok = Tokenizer::load(dir);
  Session s(model);
  GenerateOptions o;
  o.max_new_tokens = 3;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  EXPECT_EQ(ids, generate(s, &tok, prompt, o).tokens);

  // An empty prompt (stdin) still starts from the model's BOS alone.
  const auto [ids_empty, summary_empty] = run("");
  ASSERT_TRUE(summary_empty.is_object());
  EXPECT_EQ(summary_empty["prompt_tokens"], 1);
  EXPECT_EQ(ids_empty.size(), 3u);
}

}  // namespace
}  // namespace minigpt
