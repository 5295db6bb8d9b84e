// A Config's layers as the forward pass reads them (minigpt/block.h), and the rotary frequencies' formula.
#include "minigpt/block.h"

#include <algorithm>
#include <cmath>

namespace minigpt {

bool BlockDesc::any_softcap() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerDesc& l) { return l.softcap > 0.0f; });
}
bool BlockDesc::any_post_norms() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerDesc& l) { return l.post_norms; });
}
bool BlockDesc::any_rope_mscale() const {
  return std::any_of(layers.begin(), layers.end(),
                     [](const LayerDesc& l) { return l.rope_table >= 0 && l.rope_mscale != 1.0f; });
}

std::vector<float> rope_inv_freq(float theta, int64_t rotary_dim, const RopeScaling& r,
                                 const std::vector<float>& factors, bool long_context) {
  const int64_t half = rotary_dim / 2;
  std::vector<float> inv(size_t(std::max<int64_t>(half, 0)));
  if (r.kind == RopeScalingKind::LongRope && factors.empty()) {
    // _compute_longrope_parameters: 1 / (ext * base ** (arange(0, dim, 2) / dim)), in F32.
    const std::vector<float>& ext = long_context ? r.long_factor : r.short_factor;
    for (int64_t i = 0; i < half; ++i) {
      const float e = size_t(i) < ext.size() ? ext[size_t(i)] : 1.0f;
      inv[size_t(i)] = 1.0f / (e * std::pow(theta, float(2 * i) / float(rotary_dim)));
    }
    return inv;
  }
  // transformers: 1 / base ** (arange(0, dim, 2) / dim), every operation on F32 tensors.
  for (int64_t i = 0; i < half; ++i)
    inv[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(rotary_dim));
  if (!factors.empty()) {
    for (size_t i = 0; i < inv.size() && i < factors.size(); ++i) inv[i] /= factors[i];
  } else if (r.kind == RopeScalingKind::Linear) {
    for (float& f : inv) f /= r.factor;
  } else if (r.kind == RopeScalingKind::Llama3) {
    // _compute_llama3_parameters: wavelengths beyond the original context's take the frequency / factor,
    // those below a quarter of it (high_freq_factor 4) keep it, and those between are interpolated.
    const float old_len = float(r.original_context);
    const float low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
    const float two_pi = float(2.0 * M_PI);
    for (float& f : inv) {
      const float wavelen = two_pi / f;
      const float llama = wavelen > low_wavelen ? f / r.factor : f;
      const float smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      const float smoothed = (1.0f - smooth) * llama / r.factor + smooth * llama;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : llama;
    }
  }
  return inv;
}

std::vector<float> Config::rope_inv_freq(bool long_context) const {
  return minigpt::rope_inv_freq(rope_theta, rotary_dim, rope_scaling, rope_freq_factors, long_context);
}

BlockDesc describe_block(const Config& c) {
  BlockDesc b;
  b.embed_scale = c.embed_scale;
  b.output_norm = c.output_norm;
  b.logit_softcap = c.final_softcap;
  // The rotary tables: the model's, and the windowed layers' own where their base differs.
  auto table_of = [&](std::vector<float> inv) {
    for (size_t i = 0; i < b.rope_tables.size(); ++i)
      if (b.rope_tables[i] == inv) return int(i);
    b.rope_tables.push_back(std::move(inv));
    return int(b.rope_tables.size() - 1);
  };
  const int64_t D = c.head_dim();
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerDesc d;
    d.residual = !c.pre_norm           ? Residual::PostNorm
                 : c.parallel_residual ? Residual::Parallel
                                       : Residual::Sequential;
    d.norm = c.norm;
    d.eps = c.layer_norm_epsilon;
    d.post_norms = c.post_norms;
    d.n_head = c.n_head;
    d.n_kv_head = c.kv_heads();
    d.head_dim = D;
    d.scale = c.attn_scale > 0.0f ? c.attn_scale : c.scale_attn_weights ? 1.0f / std::sqrt(float(D)) : 1.0f;
    if (c.scale_attn_by_inverse_layer_idx) d.scale /= float(l + 1);
    d.softcap = c.attn_softcap;
    d.qk_norm = c.qk_norm;
    d.window = c.window_of(l);
    const bool rotary = c.position_encoding == PositionEncoding::Rotary &&
                        (c.rope_layers.empty() || c.rope_layers[size_t(l)] != 0);
    if (rotary) {
      d.rotary_dim = c.rotary_dim;
      d.rope_layout = c.rope_layout;
      if (d.window > 0 && c.rope_theta_local > 0.0f) {
        d.rope_table = table_of(rope_inv_freq(c.rope_theta_local, c.rotary_dim, RopeScaling{}));
      } else {
        d.rope_table = table_of(c.rope_inv_freq());
        if (c.rope_scaling.kind == RopeScalingKind::LongRope) {
          // LongRoPE: the long factors in a session of a longer context than the original one (llama.cpp's
          // choice); cos and sin times the attention factor at any context.
          d.rope_table_long = table_of(c.rope_inv_freq(true));
          d.rope_mscale = c.rope_scaling.attention_factor;
          b.rope_long_context = c.rope_scaling.original_context;
        }
      }
    }
    d.ffn = c.ffn;
    d.activation = c.activation;
    d.n_inner = c.n_inner;
    b.layers.push_back(d);
  }
  return b;
}

}  // namespace minigpt
