// The layers of minigpt's source, lowest first, and a test that every #include "..." in include/, src/,
// cli/, examples/ and python/ points at its own layer or one below. A file's layer is its folder's (a public
// header's is named below); an include that resolves to no file fails too, so a renamed folder cannot turn
// the test into one that passes on nothing.
//
//   core       include/minigpt/{error,tensor,ggml_type,string_table}.h, src/core/  errors, tensors, ggml's
//   types, hashes, string tables io         src/io/                                                   files,
//   atomic writes, JSON parsing quant      src/quant/                                                block
//   (de)quantization formats    include/minigpt/model_source.h, src/formats/              safetensors, GGUF,
//   llm.c's and
//                                                                        llama2.c's checkpoints: containers
//                                                                        that name no family
//   arch       include/minigpt/{config,block}.h, src/arch/               Config, the families' table, each
//                                                                        family's keys and names
//   tokenizer  include/minigpt/tokenizer.h, src/tokenizer/
//   backend    include/minigpt/{backend,registry}.h, src/backend/       the Backend interface
//   cpu, cuda  src/cpu/, src/cuda/                                       the backends
//   model      include/minigpt/model.h, src/model/                       weights from one model source
//   session    include/minigpt/session.h, src/session/                   the forward pass over Backend
//   run include/minigpt/{sampler,constraint,generate,generation_config,attention,perplexity,minigpt}.h,
//              src/run/
//   chat       include/minigpt/chat.h, src/chat/                         chat templates: a conversation as a
//                                                                        prompt, for chat, serve and Python
//   app        src/convert/, src/server/                                 what the commands are made of
//   cli        cli/                                                      the minigpt program
//   python     python/                                                   the Python package's extension
//   module
//
// One exception: the backend registry (src/backend/registry.cpp, cuda_loader.cpp) makes the backends it
// lists, so it includes cpu/ and cuda/. Public headers (include/), examples/ and python/ include public
// headers only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = MINIGPT_SOURCE_DIR;

struct Layer {
  const char* name;
  int level;
};

// The layer of a file by its path relative to the repository root; nullopt for one the table does not know.
std::optional<Layer> layer_of(const std::string& rel) {
  static const std::map<std::string, Layer> kPublic = {
      {"error.h", {"core", 0}},           {"tensor.h", {"core", 0}},
      {"ggml_type.h", {"core", 0}},       {"string_table.h", {"core", 0}},
      {"model_source.h", {"formats", 3}}, {"config.h", {"arch", 4}},
      {"block.h", {"arch", 4}},           {"tokenizer.h", {"tokenizer", 5}},
      {"backend.h", {"backend", 6}},      {"registry.h", {"backend", 6}},
      {"model.h", {"model", 8}},          {"session.h", {"session", 9}},
      {"sampler.h", {"run", 10}},         {"constraint.h", {"run", 10}},
      {"generate.h", {"run", 10}},        {"generation_config.h", {"run", 10}},
      {"speculative.h", {"run", 10}},     {"attention.h", {"run", 10}},
      {"perplexity.h", {"run", 10}},      {"minigpt.h", {"run", 10}},
      {"chat.h", {"chat", 11}},
  };
  static const std::vector<std::pair<std::string, Layer>> kFolders = {
      {"src/core/", {"core", 0}},
      {"src/io/", {"io", 1}},
      {"src/quant/", {"quant", 2}},
      {"src/formats/", {"formats", 3}},
      {"src/arch/", {"arch", 4}},
      {"src/tokenizer/", {"tokenizer", 5}},
      {"src/backend/", {"backend", 6}},
      {"src/cpu/", {"cpu", 7}},
      {"src/cuda/", {"cuda", 7}},
      {"src/model/", {"model", 8}},
      {"src/session/", {"session", 9}},
      {"src/run/", {"run", 10}},
      {"src/chat/", {"chat", 11}},  // what chat and serve share: the chat templates
      {"src/convert/", {"convert", 12}},
      {"src/server/", {"server", 12}},
      {"cli/", {"cli", 13}},
      {"examples/", {"examples", 13}},
      {"python/", {"python", 13}},
  };
  const std::string pub = "include/minigpt/";
  if (rel.rfind(pub, 0) == 0) {
    auto it = kPublic.find(rel.substr(pub.size()));
    if (it == kPublic.end()) return std::nullopt;
    return it->second;
  }
  for (const auto& [prefix, layer] : kFolders)
    if (rel.rfind(prefix, 0) == 0) return layer;
  return std::nullopt;
}

// Where `#include "name"` in `from` lands: include/ first, then src/, then beside the including file (the
// CLI's own headers), as the build's include paths give it.
std::optional<std::string> resolve(const fs::path& from, const std::string& name) {
  for (const fs::path& dir : {kRoot / "include", kRoot / "src", from.parent_path()}) {
    const fs::path p = dir / name;
    if (fs::is_regular_file(p)) return fs::relative(fs::canonical(p), fs::canonical(kRoot)).string();
  }
  return std::nullopt;
}

bool is_source(const fs::path& p) {
  static const std::vector<std::string> kExt = {".h", ".cpp", ".inc", ".cu", ".cuh"};
  for (const auto& e : kExt)
    if (p.extension() == e) return true;
  return false;
}

struct Finding {
  std::vector<std::string> violations;
  int files = 0, includes = 0;
};

Finding check_tree() {
  Finding f;
  const std::regex include_re(R"re(^\s*#\s*include\s+"([^"]+)")re");
  for (const char* top : {"include", "src", "cli", "examples", "python"}) {
    for (const auto& entry : fs::recursive_directory_iterator(kRoot / top)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      const std::string rel = fs::relative(entry.path(), kRoot).string();
      const auto from = layer_of(rel);
      ++f.files;
      if (!from) {
        f.violations.push_back(rel + ": in no layer (add its folder to tests/test_layering.cpp's table)");
        continue;
      }
      std::ifstream in(entry.path());
      std::string line;
      int line_no = 0;
      while (std::getline(in, line)) {
        ++line_no;
        std::smatch m;
        if (!std::regex_search(line, m, include_re)) continue;
        ++f.includes;
        const std::string where = rel + ":" + std::to_string(line_no) + ": #include \"" + m[1].str() + "\"";
        const auto target = resolve(entry.path(), m[1].str());
        if (!target) {
          f.violations.push_back(where + " resolves to no file");
          continue;
        }
        const auto to = layer_of(*target);
        if (!to) {
          f.violations.push_back(where + " -> " + *target + ", in no layer");
          continue;
        }
        const bool public_only =
            rel.rfind("include/", 0) == 0 || rel.rfind("examples/", 0) == 0 || rel.rfind("python/", 0) == 0;
        if (public_only && target->rfind("include/", 0) != 0) {
          f.violations.push_back(where + " -> " + *target +
                                 ": public headers, examples and the Python module include public "
                                 "headers only");
          continue;
        }
        const bool registry = (rel == "src/backend/registry.cpp" || rel == "src/backend/cuda_loader.cpp") &&
                              (std::string(to->name) == "cpu" || std::string(to->name) == "cuda");
        if (to->level > from->level && !registry)
          f.violations.push_back(where + " points up: " + from->name + " -> " + to->name);
      }
    }
  }
  return f;
}

TEST(Layering, EveryIncludePointsAtItsOwnLayerOrBelow) {
  const Finding f = check_tree();
  // The tree has some hundred files: a count far below says the walk missed them.
  EXPECT_GT(f.files, 100);
  EXPECT_GT(f.includes, 250);
  std::ostringstream all;
  for (const auto& v : f.violations) all << "\n  " << v;
  EXPECT_TRUE(f.violations.empty()) << f.violations.size() << " include(s) break the layering:" << all.str();
}

// The table itself: a file placed in a higher layer's folder is seen there (so the check above is not
// vacuous), and the exception covers the registry alone.
TEST(Layering, TheTableOrdersTheLayers) {
  ASSERT_TRUE(layer_of("src/formats/gguf.cpp"));
  ASSERT_TRUE(layer_of("src/arch/gpt2.cpp"));
  ASSERT_TRUE(layer_of("src/model/model.cpp"));
  EXPECT_LT(layer_of("src/formats/gguf.cpp")->level, layer_of("src/arch/gpt2.cpp")->level);
  EXPECT_LT(layer_of("src/arch/gpt2.cpp")->level, layer_of("src/model/model.cpp")->level);
  EXPECT_LT(layer_of("include/minigpt/tensor.h")->level, layer_of("include/minigpt/model.h")->level);
  EXPECT_LT(layer_of("src/session/session.cpp")->level, layer_of("cli/main.cpp")->level);
  EXPECT_FALSE(layer_of("include/minigpt/not_a_header.h"));
  EXPECT_FALSE(layer_of("src/elsewhere/x.cpp"));
}

}  // namespace
