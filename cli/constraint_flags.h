// The structured-output flags `generate` and `chat` share (docs/structured-output.md): --json-schema,
// --grammar-file, --json-object, compiled into the Grammar that GenerateOptions::grammar constrains
// generation with.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "minigpt/constraint.h"
#include "minigpt/tokenizer.h"

namespace minigpt::cli {

struct ConstraintFlags {
  std::string json_schema;   // --json-schema: a file's path, or the schema itself (text starting with '{')
  std::string grammar_file;  // --grammar-file: a GBNF grammar's file
  bool json_object = false;  // --json-object: any JSON object
};

void add_constraint_flags(CLI::App& app, ConstraintFlags& f);

// The grammar the flags ask for, compiled for the model's vocabulary; null when none is given. A file that
// cannot be read, a schema or grammar the engine refuses: Error(Argument) naming the flag and the file.
std::shared_ptr<const Grammar> compile_constraint(const ConstraintFlags& f, const Tokenizer& tok,
                                                  int64_t n_vocab);

}  // namespace minigpt::cli
