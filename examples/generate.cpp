// A program that embeds minigpt through its public header alone: loads a model and its tokenizer, then
// generates greedily from a prompt and prints the new ids and the text.
//
//   minigpt_example_generate [MODEL] [PROMPT] [N]      (defaults: models/shakespeare-char, "ROMEO:", 64)
//
// Built by CMake with only include/ on its include path (target minigpt_example_generate); CI runs it and
// compares its ids with transformers' greedy tokens (tests/test_example.cpp).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "minigpt/minigpt.h"

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "models/shakespeare-char";
  const std::string prompt = argc > 2 ? argv[2] : "ROMEO:";
  const long n = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 64;
  try {
    auto model = minigpt::Model::load(path);
    const auto tokenizer = minigpt::Tokenizer::load(path);
    minigpt::Session session(model);
    minigpt::GenerateOptions options;
    options.max_new_tokens = n;
    options.sampling.temperature = 0;  // greedy: the argmax at every step
    const auto result = minigpt::generate(session, &tokenizer, tokenizer.encode(prompt), options);
    std::printf("ids:");
    for (int32_t id : result.tokens) std::printf(" %d", id);
    std::printf("\ntext: %s%s\n", prompt.c_str(), result.text.c_str());
    return 0;
  } catch (const minigpt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
