// Samples a model's outputs under each JSON Schema of a fixture (tests/fixtures/json-schema/*.json), for
// tests/schema_validity/check.py, which validates them with the `jsonschema` package. Each schema is compiled
// by GrammarCompiler::json_schema(); a refused one is reported with the refusal's one line, else N outputs
// sampled at temperature 1 (no top-k, top-p or penalty), seeds 1..N, each with its stop reason.
//
// Usage: minigpt_schema_sample MODEL FIXTURE [--samples N] [--max-new-tokens N] [--every K] [--threads N]
//        [--prompt TEXT]
// Output: one JSON line per schema: {"index", "file", "description", "refused"} or {"index", "file",
// "description", "compile_s", "samples": [{"text", "reason"}]}; --every K takes schemas 0, K, 2K, ...
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "minigpt/constraint.h"
#include "minigpt/error.h"
#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/model_source.h"
#include "minigpt/session.h"
#include "minigpt/tokenizer.h"

using nlohmann::json;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: minigpt_schema_sample MODEL FIXTURE [--samples N] [--max-new-tokens N] [--every K] "
                 "[--threads N] [--prompt TEXT]\n";
    return 2;
  }
  const std::string model_path = argv[1], fixture_path = argv[2];
  int64_t samples = 20, max_new_tokens = 256, every = 1;
  int threads = 1;
  std::string prompt = "Reply with JSON only.\n";
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--samples") {
      samples = std::stoll(value);
    } else if (flag == "--max-new-tokens") {
      max_new_tokens = std::stoll(value);
    } else if (flag == "--every") {
      every = std::stoll(value);
    } else if (flag == "--threads") {
      threads = std::stoi(value);
    } else if (flag == "--prompt") {
      prompt = value;
    } else {
      std::cerr << "minigpt_schema_sample: unknown flag " << flag << "\n";
      return 2;
    }
  }
  try {
    std::ifstream in(fixture_path);
    if (!in) throw minigpt::Error(minigpt::ErrorKind::Io, fixture_path + ": cannot open");
    const json fixture = json::parse(in);
    const minigpt::ModelSource source = minigpt::ModelSource::open(model_path);
    const auto model = minigpt::Model::load(source, minigpt::LoadOptions::threads(threads));
    const minigpt::Tokenizer tok = minigpt::Tokenizer::load_for_model(source, model->config().n_vocab);
    const minigpt::GrammarCompiler compiler(tok, model->config().n_vocab);
    const std::vector<int32_t> prompt_ids = tok.encode(prompt);
    minigpt::Session session(model);
    const json& schemas = fixture.at("schemas");
    for (size_t i = 0; i < schemas.size(); i += size_t(every)) {
      const json& entry = schemas[i];
      json line = {{"index", i}, {"file", entry.at("file")}, {"description", entry.at("description")}};
      std::shared_ptr<const minigpt::Grammar> grammar;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        grammar = compiler.json_schema(entry.at("schema").dump());
      } catch (const minigpt::Error& e) {
        line["refused"] = e.what();
        std::cout << line.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
        continue;
      }
      line["compile_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      line["samples"] = json::array();
      for (int64_t seed = 1; seed <= samples; ++seed) {
        session.reset();
        minigpt::GenerateOptions o;
        o.max_new_tokens = max_new_tokens;
        o.overflow = minigpt::ContextOverflow::Slide;
        o.sampling.temperature = 1.0f;
        o.sampling.top_k = 0;
        o.sampling.seed = uint64_t(seed);
        o.grammar = grammar;
        const minigpt::GenerateResult r = minigpt::generate(session, &tok, prompt_ids, o);
        line["samples"].push_back({{"text", r.text}, {"reason", minigpt::stop_reason_name(r.reason)}});
      }
      std::cout << line.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "minigpt_schema_sample: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
