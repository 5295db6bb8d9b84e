// Attention maps: the attention probabilities (after the causal mask and the softmax) of every layer and
// head, for a sequence of tokens, as transformers' output_attentions=True gives them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "minigpt/model.h"

namespace minigpt {

struct AttentionMaps {
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_tokens = 0;  // T
  // [layer][head][query][key], full T x T rows: zero above the diagonal (key > query).
  std::vector<float> probs;

  float at(int64_t layer, int64_t head, int64_t query, int64_t key) const {
    return probs[size_t(((layer * n_head + head) * n_tokens + query) * n_tokens + key)];
  }
  // The T x T matrix of one layer and head, row-major.
  std::span<const float> head(int64_t layer, int64_t head) const {
    return {probs.data() + (layer * n_head + head) * n_tokens * n_tokens, size_t(n_tokens * n_tokens)};
  }
};

// Runs `tokens` through the model in a fresh session (one forward step from position 0) and returns the
// attention probabilities of every layer and head: softmax(scale * q.k) over keys 0 .. query, computed on
// the host in double precision from the q and k the forward pass computes (query head h reads KV head
// h / (n_head / n_kv_head)). Throws Error(Argument) for no tokens, an id outside the vocabulary, or more
// tokens than the model's context.
AttentionMaps attention_maps(std::shared_ptr<const Model> model, std::span<const int32_t> tokens);

}  // namespace minigpt
