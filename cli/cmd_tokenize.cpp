// minigpt tokenize: text -> GPT-2 ids (or ids -> text with --decode), with the model dir's tokenizer.
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "id_list.h"
#include "io/io.h"
#include "minigpt/error.h"
#include "minigpt/tokenizer.h"

namespace minigpt::cli {
namespace {

struct TokenizeOptions {
  std::string model_dir;
  std::string tokenizer;
  std::string text;
  std::string file;
  bool json = false;
  bool decode = false;
  bool special = false;
  bool no_add_special = false;
};

std::string read_input(const TokenizeOptions& o, bool have_text) {
  if (have_text) return o.text;
  if (!o.file.empty()) return read_regular_file(o.file, kMaxTextBytes, "input file");
  return read_fd_capped(STDIN_FILENO, kMaxTextBytes, "stdin");
}

void write_out(const std::string& s) { write_stdout(s); }

bool registered_tokenize = register_command(
    "tokenize",
    "Text to token ids with the model's tokenizer (stdin when neither TEXT nor --file), or ids to text with "
    "--decode",
    [](CLI::App& app) -> std::function<int()> {
      auto o = std::make_shared<TokenizeOptions>();
      app.add_option("-m,--model", o->model_dir,
                     std::string(kModelHelp) + "; or a tokenizer-only directory (or give --tokenizer alone)");
      add_tokenizer_option(app, o->tokenizer);
      auto* text_opt = app.add_option("text", o->text, "The text (or, with --decode, the ids)");
      app.add_option("--file", o->file, "Read the text (or ids) from this file")->excludes(text_opt);
      app.add_flag(
          "--json", o->json,
          "Print {\"ids\": [...], \"tokens\": [...]} (with --decode: {\"ids\": [...], \"text\": ...})");
      auto* decode = app.add_flag(
          "--decode", o->decode,
          "Read ids (\"15496 11 995\", or as transformers prints them, \"[15496, 11, 995]\"), print the "
          "text they stand for (raw bytes, no newline added)");
      // Both shape the encoding: with --decode they would do nothing, so they are refused there.
      app.add_flag("--special", o->special, "Recognise special tokens such as <|endoftext|> in the text")
          ->excludes(decode);
      app.add_flag("--no-add-special", o->no_add_special,
                   "Leave out the special tokens that tokenizer.json's post_processor puts around the text "
                   "(e.g. a BOS), as tokenizers' add_special_tokens=False")
          ->excludes(decode);
      return [o, text_opt]() {
        // Neither -m nor --tokenizer: the shipped model's tokenizer, as every command that takes -m.
        const std::string model = o->model_dir.empty() && o->tokenizer.empty()
                                      ? resolve_model_dir(ModelOptions{}).string()
                                      : o->model_dir;
        // --tokenizer alone: no model to open.
        Tokenizer tok = model.empty() ? Tokenizer::load(std::filesystem::path(o->tokenizer))
                                      : load_tokenizer(o->tokenizer, ModelSource::open(model));
        std::string input = read_input(*o, text_opt->count() > 0);
        if (o->decode) {
          const std::vector<int32_t> ids = parse_ids(input);
          const std::string text = tok.decode(ids);
          if (!o->json) {
            write_out(text);
            return 0;
          }
          // Bytes that are not UTF-8 (ids that end inside a character) become U+FFFD, as tokenizers' decode
          // gives them (--json applies here too).
          const nlohmann::json j = {{"ids", ids}, {"text", text}};
          write_out(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
          return 0;
        }
        // As tokenizers' encode() and a transformers tokenizer's __call__ give them: with the template's
        // special tokens unless --no-add-special.
        std::vector<int32_t> ids;
        try {
          ids =
              o->no_add_special ? tok.encode(input, o->special) : tok.encode_with_specials(input, o->special);
        } catch (const Error& e) {
          // Which input the text came from, as generate names its prompt's.
          const std::string where = text_opt->count() > 0 ? "TEXT" : o->file.empty() ? "stdin" : o->file;
          throw Error(e.kind(), "text (" + where + "): " + e.what());
        }
        std::string out;
        if (o->json) {
          nlohmann::json j;
          j["ids"] = ids;
          auto& tokens = j["tokens"] = nlohmann::json::array();
          for (int32_t id : ids) tokens.push_back(tok.token_symbol(id));
          out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        } else {
          for (size_t i = 0; i < ids.size(); ++i) {
            if (i) out += ' ';
            out += std::to_string(ids[i]);
          }
        }
        out += '\n';
        write_out(out);
        return 0;
      };
    });

}  // namespace
}  // namespace minigpt::cli
