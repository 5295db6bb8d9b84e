#include "constraint_flags.h"

#include "io/io.h"
#include "minigpt/error.h"

namespace minigpt::cli {
namespace {

// The engine's message without GrammarCompiler's "json_schema: " or "grammar: ", which the flag replaces.
std::string engine_message(const Error& e, const std::string& prefix) {
  const std::string m = e.what();
  return m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m;
}

}  // namespace

void add_constraint_flags(CLI::App& app, ConstraintFlags& f) {
  auto* schema = app.add_option("--json-schema", f.json_schema,
                                "Generate JSON valid against this JSON Schema: a file, or the schema itself "
                                "(text starting with '{')");
  auto* grammar =
      app.add_option("--grammar-file", f.grammar_file, "Generate text in the language of this GBNF grammar");
  auto* object = app.add_flag("--json-object", f.json_object, "Generate a JSON object (any)");
  schema->excludes(grammar)->excludes(object);
  grammar->excludes(object);
}

std::shared_ptr<const Grammar> compile_constraint(const ConstraintFlags& f, const Tokenizer& tok,
                                                  int64_t n_vocab) {
  if (f.json_schema.empty() && f.grammar_file.empty() && !f.json_object) return nullptr;
  const GrammarCompiler compiler(tok, n_vocab);
  if (f.json_object) return compiler.json_object();
  // A file that cannot be read: read_regular_file()'s message names it.
  const auto read = [](const std::string& flag, const std::string& path, const std::string& what) {
    try {
      return read_regular_file(path, kMaxConfigBytes, what);
    } catch (const Error& e) {
      throw Error(ErrorKind::Argument, flag + ": " + e.what());
    }
  };
  if (!f.grammar_file.empty()) {
    const std::string text = read("--grammar-file", f.grammar_file, "grammar file");
    try {
      return compiler.gbnf(text);
    } catch (const Error& e) {
      throw Error(ErrorKind::Argument,
                  "--grammar-file " + f.grammar_file + ": " + engine_message(e, "grammar: "));
    }
  }
  const size_t first = f.json_schema.find_first_not_of(" \t\r\n");
  const bool inline_schema = first != std::string::npos && f.json_schema[first] == '{';
  const std::string text =
      inline_schema ? f.json_schema : read("--json-schema", f.json_schema, "JSON schema file");
  try {
    return compiler.json_schema(text);
  } catch (const Error& e) {
    throw Error(ErrorKind::Argument, (inline_schema ? "--json-schema" : "--json-schema " + f.json_schema) +
                                         ": " + engine_message(e, "json_schema: "));
  }
}

}  // namespace minigpt::cli
