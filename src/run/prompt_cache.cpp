#include "run/prompt_cache.h"

#include <cstdio>
#include <system_error>

#include "core/hash.h"
#include "minigpt/error.h"

namespace minigpt {
namespace {

class Hasher {
 public:
  void add(uint64_t v) { h_ = splitmix64(h_ ^ v); }
  void add(std::string_view s) { add(fnv1a64(s)); }
  void add(Backend& backend, const Tensor& t) {
    add(uint64_t(t.numel()));
    if (t.empty() || t.dtype != DType::F32) return;
    std::vector<float> host(size_t(t.numel()));
    backend.to_host(host.data(), t);
    add(std::string_view(reinterpret_cast<const char*>(host.data()), host.size() * sizeof(float)));
  }
  void add(Backend& backend, const Linear& l) {
    add(l.format.name());
    add(uint64_t(l.n_in));
    add(uint64_t(l.n_out));
    add(backend, l.b);
  }
  uint64_t done() const { return h_; }

 private:
  uint64_t h_ = 0x6b762d6964656e74ull;
};

}  // namespace

PromptFileModel prompt_file_model(const Session& session, const std::string& name) {
  const Model& m = session.model();
  const Config& c = m.config();
  Backend& be = m.backend();
  Hasher h;
  h.add(c.arch);
  for (int64_t v : {c.n_layer, c.n_head, c.kv_heads(), c.n_embd, c.n_ctx, c.n_vocab, c.n_inner})
    h.add(uint64_t(v));
  const ModelWeights& w = m.weights();
  h.add(be, w.token_embd);
  h.add(be, w.proj_in);
  h.add(be, w.pos_embd);
  h.add(be, w.out_norm_w);
  h.add(be, w.out_norm_b);
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.attn_norm_w, &l.attn_norm_b, &l.attn_q_norm, &l.attn_k_norm, &l.ffn_norm_w,
                            &l.ffn_norm_b, &l.attn_post_norm_w, &l.ffn_post_norm_w})
      h.add(be, *t);
    for (const Linear* x : {&l.attn_qkv, &l.attn_out, &l.ffn_up, &l.ffn_down}) h.add(be, *x);
    for (const Linear& x : l.attn_qkv_parts) h.add(be, x);
    for (const Linear& x : l.ffn_up_parts) h.add(be, x);
  }
  PromptFileModel pm;
  pm.identity = h.done();
  pm.dtype = session.kv_cache().dtype();
  pm.position_bytes = session.kv_position_bytes();
  pm.n_vocab = c.n_vocab;
  char id[20];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(pm.identity));
  pm.name = name + " (" + c.arch + ", " + std::to_string(c.n_layer) + " layers, " + std::to_string(c.n_embd) +
            " wide, vocab " + std::to_string(c.n_vocab) + ", identity " + id + ")";
  return pm;
}

PromptRestore restore_prompt_cache(Session& session, const std::filesystem::path& file,
                                   std::span<const int32_t> prompt, const PromptFileModel& model) {
  PromptRestore r;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return r;
  const ByteSource src = ByteSource::open_file(file);
  const PromptFileHeader h = read_prompt_file_header(src);
  check_prompt_file_model(h, model, src.source());
  // The tokens first, then only the keys and values of the prefix the prompt shares (the checksum covers
  // the whole body, read either way).
  r.tokens = read_prompt_file_tokens(src, h);
  size_t common = 0;
  const size_t limit = prompt.empty() ? 0 : prompt.size() - 1;
  while (common < limit && common < r.tokens.size() && r.tokens[common] == prompt[common]) ++common;
  common = std::min<size_t>(common, size_t(session.n_ctx()));
  const PromptFileBody body = read_prompt_file_body(src, h, int64_t(common));
  session.reset(0);
  if (common > 0) session.write_kv(0, 0, int64_t(common), body.kv.data());
  r.restored = int64_t(common);
  return r;
}

void save_prompt_cache(const Session& session, const std::filesystem::path& file,
                       std::span<const int32_t> prompt, const PromptFileModel& model) {
  const int64_t n = int64_t(prompt.size());
  std::vector<char> kv(size_t(n) * model.position_bytes);
  if (n > 0) session.read_kv(0, 0, n, kv.data());
  write_prompt_file(file, model, prompt, kv);
}

}  // namespace minigpt
