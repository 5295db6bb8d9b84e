// What each layer of a model computes, described layer by layer: the forward pass (src/session/session.cpp)
// reads only this, never a family's name. arch/ makes it from a Config (describe_block, src/arch/block.cpp):
// where the norms sit, the attention's heads, score scale, soft-cap and window, the rotary frequencies of
// the layer (or none), the MLP; and what surrounds the layers (the embeddings' scale, the final norm and
// the logits' soft-cap).
#pragma once

#include <cstdint>
#include <vector>

#include "minigpt/config.h"

namespace minigpt {

// How a layer's two halves meet the residual stream x:
//   Sequential: x += attn(n1(x)); x += mlp(n2(x))                      (GPT-2, Llama, Gemma)
//   Parallel:   x += attn(n1(x)) + mlp(n2(x)), both norms of the same x (GPT-J, GPT-NeoX)
//   PostNorm:   x = n1(x + attn(x)); x = n2(x + mlp(x))                 (OPT-350m)
enum class Residual { Sequential, Parallel, PostNorm };

struct LayerDesc {
  Residual residual = Residual::Sequential;
  NormKind norm = NormKind::Layer;  // of every norm of the layer
  float eps = 1e-5f;
  // Gemma's "sandwich": a norm of each half's output before it joins the residual stream,
  // x += post_n1(attn(n1(x))); x += post_n2(mlp(n2(x))) (LayerWeights::attn_post_norm_w, ffn_post_norm_w).
  bool post_norms = false;

  // Attention: query heads, key/value heads (query head h reads KV head h / (n_head / n_kv_head)), width.
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;
  float scale = 1.0f;    // scores = scale * q.k
  float softcap = 0.0f;  // scores = softcap * tanh(scores / softcap) before the softmax (Gemma 2); 0: none
  bool qk_norm = false;  // a per-head norm of q and k before the rotary positions (Qwen3, Gemma 3)
  int64_t window = 0;    // a query at position p sees keys p - window + 1 .. p; 0: every earlier position

  // Rotary positions: the leading rotary_dim dimensions of each q and k head rotate in pairs (rope_layout)
  // by position * BlockDesc::rope_tables[rope_table][i]. rope_table -1: no rotary positions in this layer
  // (learned or sinusoidal positions, or SmolLM3's NoPE layers).
  int rope_table = -1;
  // The table of a session whose context is longer than BlockDesc::rope_long_context (LongRoPE's long
  // factors); -1: rope_table at any context.
  int rope_table_long = -1;
  int64_t rotary_dim = 0;
  RopeLayout rope_layout = RopeLayout::NeoxHalves;
  float rope_mscale = 1.0f;  // cos and sin times this (LongRoPE's attention factor)

  FfnKind ffn = FfnKind::Plain;
  Activation activation = Activation::GeluTanh;
  int64_t n_inner = 0;
};

struct BlockDesc {
  std::vector<LayerDesc> layers;
  float embed_scale =
      0.0f;  // the token embeddings (after any projection) times this (Gemma: sqrt(C)); 0: none
  bool output_norm = true;     // a norm after the last layer (of the first layer's kind and eps)
  float logit_softcap = 0.0f;  // logits = cap * tanh(logits / cap) (Gemma 2); 0: none
  // The distinct rotary inverse-frequency tables the layers use (each rotary_dim / 2 floats, computed once
  // by rope_inv_freq).
  std::vector<std::vector<float>> rope_tables;
  // A session of a context (SessionOptions::n_ctx) longer than this rotates every position by the layers'
  // rope_table_long, as llama.cpp picks LongRoPE's factors by its context size; 0: none.
  int64_t rope_long_context = 0;

  // Whether any layer has a soft-cap of its scores, post-norms, a scaled rotation.
  bool any_softcap() const;
  bool any_post_norms() const;
  bool any_rope_mscale() const;
  // The rotary table of layer `d` in a session of context n_ctx (-1: none).
  int rope_table_of(const LayerDesc& d, int64_t n_ctx) const {
    return d.rope_table_long >= 0 && rope_long_context > 0 && n_ctx > rope_long_context ? d.rope_table_long
                                                                                        : d.rope_table;
  }
};

// A model's layers as the forward pass reads them, from its config (src/arch/block.cpp).
BlockDesc describe_block(const Config& c);

// The rotary inverse frequencies, rotary_dim / 2 of them, as transformers computes them in F32: 1 /
// theta^(2i / rotary_dim), then `scaling` applied (a longrope's long factors where `long_context`, its short
// ones otherwise), or divided by `factors` where given (llama.cpp's rope_freqs tensor). The one place the
// formula is written.
std::vector<float> rope_inv_freq(float theta, int64_t rotary_dim, const RopeScaling& scaling,
                                 const std::vector<float>& factors = {}, bool long_context = false);

}  // namespace minigpt
