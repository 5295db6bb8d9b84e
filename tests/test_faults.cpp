// The library's side of the faults outside testing found (issue: "nothing lost, nothing silent"): files that
// change under a running model, non-finite weights and logits, values a compute dtype cannot hold, tensors
// that do not belong to the model, tiny temperatures, and seeds whose random streams overlapped.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <limits>
#include <set>

#include "io/io.h"
#include "minigpt/model.h"
#include "minigpt/sampler.h"
#include "minigpt/session.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::expect_error;
using test::rewrite_weights;
using test::TempDir;

// Sets element `index` of the F32 tensor `name` to `value`.
void poke(const std::filesystem::path& dir, const std::string& name, size_t index, float value) {
  rewrite_weights(dir, [&](auto& w, auto& keep) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i].name == name) std::memcpy(keep[i].data() + index * sizeof(float), &value, sizeof value);
    }
  });
}

TEST(Faults, NonFiniteWeightsAreRefusedAtLoadNamingTheTensor) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    TempDir tmp;
    write_random_model(tmp.path(), test::tiny_config());
    poke(tmp.path(), "h.1.mlp.c_fc.weight", 70, bad);  // row 1, column 6 of [16, 64]
    expect_error(
        [&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Format,
        {"tensor 'h.1.mlp.c_fc.weight'", std::isnan(bad) ? "nan" : "inf", "element 70 (row 1, column 6)"});
  }
}

TEST(Faults, ValuesBeyondF16sRangeAreRefusedWhenComputingInF16) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  poke(tmp.path(), "h.0.attn.c_proj.weight", 3, 1e5f);  // finite in F32 and BF16, infinite in F16
  LoadOptions f16 = LoadOptions::threads(1);
  f16.weight_dtype = DType::F16;
  expect_error([&] { Model::load(tmp.path(), f16); }, ErrorKind::Argument,
               {"tensor 'h.0.attn.c_proj.weight'", "100000", "beyond F16's range"});
  LoadOptions bf16 = LoadOptions::threads(1);
  bf16.weight_dtype = DType::BF16;
  EXPECT_NO_THROW(Model::load(tmp.path(), bf16));
  EXPECT_NO_THROW(Model::load(tmp.path(), LoadOptions::threads(1)));
}

TEST(Faults, NonFiniteLogitsAreAnErrorNotAToken) {
  // Finite weights whose logits overflow F32: the final layer norm scaled by 3e38.
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  rewrite_weights(tmp.path(), [](auto& w, auto& keep) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i].name != "ln_f.weight") continue;
      for (size_t j = 0; j < keep[i].size() / sizeof(float); ++j) {
        const float big = 3e38f;  // finite; times a normalised value of ~1-4 it is not
        std::memcpy(keep[i].data() + j * sizeof(float), &big, sizeof big);
      }
    }
  });
  auto model = Model::load(tmp.path(), LoadOptions::threads(1));
  Session s(model);
  const std::vector<int32_t> tokens = {1, 2, 3};
  expect_error([&] { s.eval(tokens); }, ErrorKind::Numeric, {"logits at position 2 are not finite"});
  s.reset();
  expect_error([&] { s.eval_all(tokens); }, ErrorKind::Numeric, {"logits at position 0 are not finite"});
}

TEST(Faults, ATiedModelRefusesALmHeadThatIsNotWte) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());  // tied
  auto add_head = [&](float delta) {
    rewrite_weights(tmp.path(), [&](auto& w, auto& keep) {
      std::erase_if(w, [](const SafeTensorWrite& t) { return t.name == "lm_head.weight"; });
      for (size_t i = 0; i < w.size(); ++i) {
        if (w[i].name != "wte.weight") continue;
        // keep[] is in the file's order, w[] lost an entry above: find wte's bytes by address.
        const auto bytes =
            std::find_if(keep.begin(), keep.end(), [&](const auto& k) { return k.data() == w[i].data; });
        std::vector<uint8_t> copy = *bytes;
        float v;
        std::memcpy(&v, copy.data(), 4);
        v += delta;
        std::memcpy(copy.data(), &v, 4);
        keep.push_back(std::move(copy));  // w's pointers stay valid: the inner buffers do not move
        w.push_back({"lm_head.weight", StDtype::F32, w[i].shape, keep.back().data()});
        break;
      }
    });
  };
  add_head(0.0f);  // a saved copy of wte, as some exporters write: accepted (transformers ties it too)
  EXPECT_NO_THROW(Model::load(tmp.path(), LoadOptions::threads(1)));
  add_head(0.5f);
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Shape,
               {"'lm_head.weight' differs from 'wte.weight'", "tie_word_embeddings"});
}

TEST(Faults, LegacyBuffersOfLayersTheModelLacksAreRefused) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());  // 2 layers
  static const float scalar = -1e4f;
  rewrite_weights(tmp.path(), [](auto& w, auto&) {
    w.push_back({"h.1.attn.bias", StDtype::F32, {}, &scalar});
  });
  EXPECT_NO_THROW(Model::load(tmp.path(), LoadOptions::threads(1)));
  rewrite_weights(tmp.path(), [](auto& w, auto&) {
    w.push_back({"h.99.attn.bias", StDtype::F32, {}, &scalar});
  });
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Shape,
               {"unexpected tensor 'h.99.attn.bias'", "n_layer = 2"});
}

TEST(Faults, AModelIsIndependentOfItsFilesAfterLoad) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  auto model = Model::load(tmp.path(), LoadOptions::threads(1));
  Session a(model);
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  const auto logits = a.eval(tokens);
  const std::vector<float> before(logits.begin(), logits.end());
  // Truncate and rewrite the file: a mapping would now fault (SIGBUS) or compute with the new bytes.
  ASSERT_EQ(::truncate((tmp / "model.safetensors").c_str(), 0), 0);
  Config other = test::tiny_config();
  other.n_layer = 1;
  write_random_model(tmp.path(), other);
  Session b(model);
  const auto after = b.eval(tokens);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(after[i], before[i]) << i;
}

TEST(Faults, AWeightFileTruncatedAfterOpeningIsAnErrorNotACrash) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  auto f = SafeTensorsFile::open(tmp / "model.safetensors");
  ASSERT_EQ(::truncate((tmp / "model.safetensors").c_str(), 100), 0);
  const SafeTensor* t = f->find("ln_f.bias");
  ASSERT_NE(t, nullptr);
  std::vector<uint8_t> dst(t->nbytes);
  expect_error([&] { f->read(*t, dst.data()); }, ErrorKind::Io,
               {"model.safetensors", "truncated after it was opened"});
}

TEST(Faults, ContextSizeBoundsTheSession) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());  // n_ctx 24
  auto model = Model::load(tmp.path(), LoadOptions::threads(1));
  SessionOptions o;
  o.n_ctx = 8;
  Session s(model, o);
  EXPECT_EQ(s.n_ctx(), 8);
  const std::vector<int32_t> nine(9, 1);
  expect_error([&] { s.eval(nine); }, ErrorKind::Argument, {"context overflow", "> n_ctx 8"});
  // The first 8 positions give what a full-context session gives.
  Session full(model);
  const std::vector<int32_t> eight(8, 3);
  const auto a = full.eval(eight);
  const auto b = s.eval(eight);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
  o.n_ctx = 25;
  expect_error([&] { Session bad(model, o); }, ErrorKind::Argument, {"context size 25", "[1, 24]"});
}

TEST(Faults, ATemperatureTooSmallToDivideByIsGreedy) {
  std::vector<float> logits = {0.5f, 3.0f, 2.9f, -1.0f, 2.99f};
  SamplingParams p;
  p.top_k = 0;
  for (float t : {1e-40f, 1e-38f, 1e-30f}) {
    p.temperature = t;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      p.seed = seed;
      Sampler s(p, int64_t(logits.size()));
      EXPECT_EQ(s.sample(logits, {}), 1) << "T " << t << " seed " << seed;
    }
  }
}

// Draws `n` tokens from a uniform distribution over `v` ids with this seed.
std::vector<int32_t> uniform_draws(uint64_t seed, size_t n, int64_t v) {
  SamplingParams p;
  p.top_k = 0;
  p.seed = seed;
  Sampler s(p, v);
  const std::vector<float> flat(size_t(v), 0.0f);
  std::vector<int32_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(s.sample(flat, {}));
  return out;
}

TEST(Faults, ConsecutiveSeedsGiveIndependentStreams) {
  // Were the generator's state to start at the seed itself, seed N + 1's draws would be seed N's shifted by
  // one. Over 256 ids, two independent streams agree at a given offset about 1 time in 256: over 4000
  // draws ~16 times (the bound of 60 is over 10 standard deviations away).
  const size_t n = 4000;
  const int64_t v = 256;
  for (uint64_t seed : {0ull, 1ull, 41ull, 1000000ull}) {
    const auto a = uniform_draws(seed, n, v), b = uniform_draws(seed + 1, n, v);
    for (int shift = -3; shift <= 3; ++shift) {
      size_t same = 0;
      for (size_t i = 3; i + 3 < n; ++i) same += a[i] == b[size_t(int64_t(i) + shift)];
      EXPECT_LT(same, 60u) << "seeds " << seed << ", " << seed + 1 << " agree at shift " << shift;
    }
  }
  // Still a uniform draw: every id shows up, none more than ~3x its share.
  const auto a = uniform_draws(7, n, 16);
  std::vector<int> count(16);
  for (int32_t id : a) ++count[size_t(id)];
  for (int c : count) {
    EXPECT_GT(c, 150);
    EXPECT_LT(c, 350);
  }
}

TEST(Faults, OnlyRegularFilesWithinTheirCapAreRead) {
  TempDir tmp;
  test::write_file(tmp / "ok.txt", "hello");
  EXPECT_EQ(read_regular_file(tmp / "ok.txt", 5, "prompt file"), "hello");
  expect_error([&] { read_regular_file(tmp / "ok.txt", 4, "prompt file"); }, ErrorKind::Io,
               {"ok.txt", "5 bytes, more than the 4 bytes a prompt file may have"});
  expect_error([&] { read_regular_file(tmp.path(), 100, "prompt file"); }, ErrorKind::Io, {"is a directory"});
  ASSERT_EQ(::mkfifo((tmp / "fifo").c_str(), 0600), 0);
  expect_error([&] { read_regular_file(tmp / "fifo", 100, "config"); }, ErrorKind::Io, {"fifo", "is a FIFO"});
  std::filesystem::create_symlink("/dev/zero", tmp / "zero.json");
  expect_error([&] { read_regular_file(tmp / "zero.json", 100, "config"); }, ErrorKind::Io,
               {"zero.json", "character device"});
  expect_error([&] { read_regular_file(tmp / "missing", 100, "config"); }, ErrorKind::Io,
               {"missing", "cannot open"});
}

// The checkpoint readers (GGUF, llm.c, llama2.c) read through ByteSource: a FIFO is refused at open, never
// waited on (a plain open of one blocks until a writer comes), and no read reaches past the end.
TEST(Faults, ByteSourceRefusesAFifoAndReadsOnlyInsideTheFile) {
  TempDir tmp;
  ASSERT_EQ(::mkfifo((tmp / "model.gguf").c_str(), 0600), 0);
  expect_error([&] { ByteSource::open_file(tmp / "model.gguf"); }, ErrorKind::Io,
               {"model.gguf", "not a regular file"});
  expect_error([&] { ByteSource::open_file(tmp / "missing.bin"); }, ErrorKind::Io,
               {"missing.bin", "cannot open"});
  test::write_file(tmp / "eight.bin", "01234567");
  const ByteSource f = ByteSource::open_file(tmp / "eight.bin");
  EXPECT_EQ(f.size(), 8u);
  char got[4] = {};
  f.fetch(got, 4, 4);
  EXPECT_EQ(std::string(got, 4), "4567");
  expect_error([&] { f.fetch(got, 4, 5); }, ErrorKind::Io,
               {"eight.bin", "reading 4 bytes at 5 past the end"});
  expect_error([&] { f.fetch(got, 1, ~uint64_t(0)); }, ErrorKind::Io, {"past the end"});
  const uint8_t image[3] = {1, 2, 3};
  const ByteSource m = ByteSource::in_memory(image, 3, "image");
  uint8_t two[2] = {};
  m.fetch(two, 2, 1);
  EXPECT_EQ(two[0], 2);
  EXPECT_EQ(two[1], 3);
  expect_error([&] { m.fetch(two, 2, 2); }, ErrorKind::Io, {"image", "past the end"});
}

// The files minigpt writes (GGUF, safetensors, --save-logits, attention maps) go through AtomicFile: whole or
// not at all, and never over something that is not a regular file: a bare rename would replace a device or a
// FIFO given as the output (`quantize M /dev/full` would leave a regular file at /dev/full) and a symbolic
// link itself instead of the file it leads to.
TEST(Faults, AtomicFileWritesWholeFilesAndOnlyOverRegularOnes) {
  namespace fs = std::filesystem;
  TempDir tmp;
  auto files = [&] {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.path())) names.insert(e.path().filename().string());
    return names;
  };
  // A new file: all the bytes (more than the 1 MiB buffer, in pieces), nothing else left in the folder.
  std::string big(size_t(3) << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char('a' + i % 26);
  {
    AtomicFile f(tmp / "new.bin", "new.bin");
    f.write(big.data(), 10);
    f.write(big.data() + 10, big.size() - 10);
    EXPECT_EQ(f.size(), big.size());
    EXPECT_FALSE(fs::exists(tmp / "new.bin"));  // nothing at the destination until commit()
    f.commit();
  }
  EXPECT_EQ(test::read_file(tmp / "new.bin"), big);
  EXPECT_EQ(files(), std::set<std::string>{"new.bin"});
  // Not committed: the old content stays, the temporary goes.
  {
    AtomicFile f(tmp / "new.bin", "new.bin");
    f.write("short", 5);
  }
  EXPECT_EQ(test::read_file(tmp / "new.bin"), big);
  EXPECT_EQ(files(), std::set<std::string>{"new.bin"});
  // A replaced file keeps its mode.
  ASSERT_EQ(::chmod((tmp / "new.bin").c_str(), 0640), 0);
  {
    AtomicFile f(tmp / "new.bin", "new.bin");
    f.write("abc", 3);
    f.commit();
  }
  struct stat st;
  ASSERT_EQ(::stat((tmp / "new.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(test::read_file(tmp / "new.bin"), "abc");
  // A symbolic link (relative, in a chain) is followed: the file it leads to is written, the links stay.
  fs::create_symlink("new.bin", tmp / "link1");
  fs::create_symlink(tmp / "link1", tmp / "link2");
  {
    AtomicFile f(tmp / "link2", "link2");
    EXPECT_EQ(f.target(), tmp / "new.bin");
    f.write("via link", 8);
    f.commit();
  }
  EXPECT_TRUE(fs::is_symlink(tmp / "link1"));
  EXPECT_TRUE(fs::is_symlink(tmp / "link2"));
  EXPECT_EQ(test::read_file(tmp / "new.bin"), "via link");
  // A dangling link makes the file it names.
  fs::create_symlink("later.bin", tmp / "dangling");
  {
    AtomicFile f(tmp / "dangling", "dangling");
    f.write("made", 4);
    f.commit();
  }
  EXPECT_TRUE(fs::is_symlink(tmp / "dangling"));
  EXPECT_EQ(test::read_file(tmp / "later.bin"), "made");
  // Refused before anything is written: a FIFO, a link to one, a directory, a device.
  ASSERT_EQ(::mkfifo((tmp / "fifo").c_str(), 0600), 0);
  fs::create_symlink("fifo", tmp / "to-fifo");
  fs::create_directory(tmp / "dir");
  const auto before = files();
  expect_error([&] { AtomicFile f(tmp / "fifo", "out.gguf"); }, ErrorKind::Io, {"out.gguf", "is a FIFO"});
  expect_error([&] { AtomicFile f(tmp / "to-fifo", "x"); }, ErrorKind::Io, {"is a FIFO"});
  expect_error([&] { AtomicFile f(tmp / "dir", "x"); }, ErrorKind::Io, {"is a directory"});
  // /dev/null is only looked at: AtomicFile throws before it makes a temporary, so even a broken check could
  // not replace the device here.
  expect_error([&] { AtomicFile f("/dev/null", "/dev/null"); }, ErrorKind::Io,
               {"/dev/null", "is a character device"});
  EXPECT_EQ(files(), before);
  EXPECT_EQ(fs::status(tmp / "fifo").type(), fs::file_type::fifo);
  // A folder that does not exist: one line, nothing made.
  expect_error([&] { AtomicFile f(tmp / "no" / "x.bin", "x.bin"); }, ErrorKind::Io,
               {"x.bin", "cannot create a file there"});
}

// A signal that ends the process while an AtomicFile is being written removes its temporary first, and the
// process still ends by that signal (not leaving a hidden '.NAME.tmp.XXXXXX', as large as the output got,
// beside it after Ctrl-C in a long quantize or perplexity --save-logits). A handler the program set itself
// (as generate and serve do for Ctrl-C) is kept: the program ends its work and the destructor removes the
// temporary. Each case runs in a forked child (gtest's death test).
volatile std::sig_atomic_t g_seen_signal = 0;
extern "C" void note_signal(int sig) { g_seen_signal = sig; }

TEST(FaultsDeathTest, ASignalThatEndsTheProcessRemovesTheTemporary) {
  namespace fs = std::filesystem;
  GTEST_FLAG_SET(death_test_style, "fast");  // forked: the child writes into this test's folder
  TempDir tmp;
  test::write_file(tmp / "out.bin", "old");
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    EXPECT_EXIT(
        {
          std::signal(sig, SIG_DFL);
          AtomicFile f(tmp / "out.bin", "out.bin");
          f.write("new content", 11);
          std::raise(sig);
          std::_Exit(0);  // not reached: the signal ends the child
        },
        testing::KilledBySignal(sig), "")
        << strsignal(sig);
    std::set<std::string> left;
    for (const auto& e : fs::directory_iterator(tmp.path())) left.insert(e.path().filename().string());
    EXPECT_EQ(left, std::set<std::string>{"out.bin"}) << strsignal(sig);
    EXPECT_EQ(test::read_file(tmp / "out.bin"), "old") << strsignal(sig);
  }
  EXPECT_EXIT(
      {
        std::signal(SIGINT, note_signal);
        {
          AtomicFile f(tmp / "out.bin", "out.bin");
          f.write("new content", 11);
          std::raise(SIGINT);
          if (g_seen_signal != SIGINT) std::_Exit(1);
        }  // not committed: the destructor removes the temporary
        std::_Exit(fs::exists(tmp / "out.bin") &&
                           std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()) == 1
                       ? 3
                       : 2);
      },
      testing::ExitedWithCode(3), "");
}

}  // namespace
}  // namespace minigpt
