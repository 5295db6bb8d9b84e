// minigpt: the command-line front end. Every subcommand is a cmd_*.cpp file that registers itself.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "arch/arch.h"
#include "command.h"
#include "common.h"
#include "minigpt/error.h"

namespace minigpt::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace minigpt::cli

namespace {
// CLI11 2.1 reads an integer with strtoll(s, nullptr, 0): "-n 010" was 8 (octal), "--seed 0x10" 16, and a
// number past the type's range became its largest value without a word ("--seed 99999999999999999999"
// ran with 18446744073709551615). Every integer option takes a decimal number instead (leading zeros,
// a '+' and surrounding spaces allowed, as llama.cpp's std::stoi and Python's int() read it), within 64
// bits; CLI11 then checks the option's own type and range. Runs before the option's other validators.
CLI::Validator decimal_integer(bool is_signed) {
  return CLI::Validator(
      [is_signed](std::string& s) -> std::string {
        const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
        const std::string given = s;
        std::string t = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
        const bool negative = !t.empty() && t[0] == '-';
        if (!t.empty() && (t[0] == '-' || t[0] == '+')) t.erase(0, 1);
        if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
          return "'" + given + "' is not a decimal integer";
        t.erase(0, std::min(t.find_first_not_of('0'), t.size() - 1));  // "007" -> "7", "000" -> "0"
        // An integer past the option's type: a value of the flag's form that it refuses (exit 1).
        if (negative && !is_signed && t != "0") return minigpt::cli::refuse("must be >= 0, got " + given);
        // 2^63 - 1 (or 2^63 negated) and 2^64 - 1: compared as digit strings of equal length.
        const std::string max = !is_signed ? "18446744073709551615"
                                : negative ? "9223372036854775808"
                                           : "9223372036854775807";
        if (t.size() > max.size() || (t.size() == max.size() && t > max)) {
          return minigpt::cli::refuse(
              given + " is out of range (" +
              (is_signed ? std::string("a 64-bit signed integer") : std::string("at most ") + max) + ")");
        }
        s = (negative && t != "0" ? "-" : "") + t;
        return std::string();
      },
      "");
}

// CLI11 2.1 reads an empty value of a FLOAT option as 0 ("--temperature ''", an unset variable, would sample
// greedily without a word) and converts a double to the option's float silently (1e-300 becomes 0, 1e300
// infinity, each then refused as "got 0" or "got inf", values the user never gave). Every FLOAT option is a
// 32-bit float: it takes a decimal number (surrounding spaces allowed; inf and nan pass on to the option's
// own range check, which names them) that a float holds.
CLI::Validator decimal_float() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
        const std::string t = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
        const bool hex = t.find_first_of("xX") != std::string::npos;
        char* end = nullptr;
        const double v = t.empty() || hex ? 0.0 : std::strtod(t.c_str(), &end);
        if (t.empty() || hex || end != t.c_str() + t.size()) return "'" + s + "' is not a decimal number";
        if (std::isfinite(v) && std::fabs(v) > double(std::numeric_limits<float>::max()))
          return minigpt::cli::refuse(t + " is out of range (a 32-bit float: at most 3.4e38)");
        if (v != 0.0 && float(v) == 0.0f)
          return minigpt::cli::refuse(
              t +
              " is too small for a 32-bit float (it would be 0; the smallest positive "
              "is 1.4e-45)");
        s = t;
        return std::string();
      },
      "");
}
}  // namespace

int main(int argc, char** argv) {
  using namespace minigpt::cli;
  // parse(args) never sees argv[0]
  // The families from the architecture table, so that a new one is named here without an edit.
  CLI::App app{
      "minigpt: a small, fast transformer inference engine on the CPU (and CUDA) that gives the tokens "
      "transformers gives. It runs GPT-2-era and Llama-shaped models (model_type " +
          minigpt::arch::known_model_types() +
          ") from Hugging Face directories, GGUF files (F32, F16, BF16 and 8 quantized types), and llm.c and "
          "llama2.c checkpoints; it generates, chats, serves an OpenAI API, measures speed and perplexity, "
          "shows attention, converts and quantizes.",
      "minigpt"};
  app.footer(
      "Every command that takes -m runs the shipped model, models/shakespeare-char, without it.\n"
      "Exit status: 0 done; 2 the command line cannot be read (an unknown command or flag, a flag without "
      "its "
      "value, a required argument missing, flags that exclude each other, a value not of the flag's form: "
      "not "
      "a number, not one of its choices); 1 a value of the right form that is refused (outside the flag's "
      "range, past what the model allows), or a file or the data refused, or a failure while running; 3 an "
      "internal error (a bug).");
  app.require_subcommand(1);
  app.set_version_flag("--version", kVersion);

  auto commands = command_registry();
  std::sort(commands.begin(), commands.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    runners[sub] = c.setup(*sub);
    for (CLI::Option* opt : sub->get_options()) {
      const std::string type = opt->get_type_name();
      if (type.starts_with("INT")) opt->transform(decimal_integer(true), "decimal");
      if (type.starts_with("UINT")) opt->transform(decimal_integer(false), "decimal");
      if (type.starts_with("FLOAT")) opt->transform(decimal_float(), "decimal");
    }
  }

  // CLI11 would only say "A subcommand is required" for a misspelt command; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    if (std::none_of(commands.begin(), commands.end(), [&](const Command& c) { return c.name == name; })) {
      std::string known;
      for (const auto& c : commands) known += (known.empty() ? "" : ", ") + c.name;
      std::fprintf(stderr, "minigpt: error: unknown command '%s' (commands: %s)\n", name.c_str(),
                   known.c_str());
      return 2;
    }
  }

  // CLI11 2.1 reads "--prompt=" (an explicit empty value) as "--prompt" followed by the next argument,
  // which would then become the value: "--prompt= --no-echo" prompted with "--no-echo". Spelt as two
  // arguments, "--prompt" "", the empty value is taken as given.
  std::vector<std::string> args;
  bool options_ended = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") options_ended = true;
    // llama.cpp's two-letter short flag (-np N: slots), which CLI11 cannot declare.
    if (!options_ended && (a == "-np" || a.starts_with("-np="))) a = "--parallel" + a.substr(3);
    if (!options_ended && a.size() > 3 && a.starts_with("--") && a.back() == '=' &&
        a.find('=') == a.size() - 1) {
      args.push_back(a.substr(0, a.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(std::move(a));
    }
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order

  try {
    app.parse(args);
  } catch (const CLI::Success& e) {
    const int rc = app.exit(e);  // --help, --version: printed on std::cout
    std::cout.flush();
    if (!std::cout) {
      std::fprintf(stderr, "minigpt: error: writing to stdout failed\n");
      return 1;
    }
    return rc;
  } catch (const CLI::ParseError& e) {
    // One line on stderr, exit 2 as for an unknown command (CLI11's own codes, 101-115, say nothing a
    // script could use); CLI11's own wording names the flag. A validator's refusal of a value of the right
    // form (refuse(): outside the flag's range) exits 1, as the commands' own refusals do.
    std::string what = e.what();
    // A flag given twice: CLI11 says "--model: At Most 1 required but received 2".
    const std::string at_most = ": At Most 1 required but received ";
    if (const size_t at = what.find(at_most); at != std::string::npos) {
      const std::string times = what.substr(at + at_most.size());
      if (!times.empty() && times.find_first_not_of("0123456789") == std::string::npos)
        what = what.substr(0, at) + ": given " + times + " times; give it once";
    }
    if (value_refused()) {
      std::fprintf(stderr, "minigpt: error: %s\n", what.c_str());
      return 1;
    }
    std::fprintf(stderr, "minigpt: error: %s (see minigpt --help)\n", what.c_str());
    return 2;
  }

  try {
    for (auto& [sub, run] : runners) {
      if (!sub->parsed()) continue;
      const int rc = run();
      finish_stdout();  // output written with printf: a failed write is an error, not a success
      return rc;
    }
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "minigpt: error: %s (see minigpt --help)\n", e.what());
    return 2;
  } catch (const minigpt::Error& e) {
    std::fprintf(stderr, "minigpt: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "minigpt: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minigpt: internal error: %s\n", e.what());
    return 3;
  }
}
