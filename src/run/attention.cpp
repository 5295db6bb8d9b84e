// Attention maps from the q and k a forward pass computes (Session's q|k|v observer).
#include "minigpt/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "minigpt/error.h"
#include "minigpt/session.h"

namespace minigpt {

AttentionMaps attention_maps(std::shared_ptr<const Model> model, std::span<const int32_t> tokens) {
  if (!model) throw Error(ErrorKind::Argument, "attention maps: no model");
  const Config& c = model->config();
  const int64_t T = int64_t(tokens.size());
  if (T == 0) throw Error(ErrorKind::Argument, "attention maps: no tokens");
  if (T > c.n_ctx) {
    throw Error(ErrorKind::Argument, "attention maps: " + std::to_string(T) +
                                         " tokens are more than the model's context of " +
                                         std::to_string(c.n_ctx) + " (n_positions)");
  }
  const int64_t H = c.n_head, Hkv = c.kv_heads(), D = c.head_dim(), KV = c.kv_dim();
  const int64_t W = H * D + 2 * KV;  // a row of q|k|v
  const int64_t group = H / Hkv;     // query heads per KV head

  AttentionMaps maps;
  maps.n_layer = c.n_layer;
  maps.n_head = H;
  maps.n_tokens = T;
  maps.probs.assign(size_t(c.n_layer * H * T * T), 0.0f);

  // One step over the whole sequence: the observer sees every query and key of a layer at once.
  SessionOptions so;
  so.n_ctx = T;
  so.max_batch = T;
  Session session(model, so);
  Backend& be = model->backend();
  std::vector<float> qkv(size_t(T * W));
  std::vector<double> scores(static_cast<size_t>(T));
  int64_t layers_seen = 0;
  session.set_qkv_observer([&](int64_t layer, const Step& step, const Tensor& t) {
    if (step.n_tokens != T || t.rows != T || t.cols != W) {
      throw Error(ErrorKind::Shape, "attention maps: the step's q|k|v is [" + std::to_string(t.rows) + ", " +
                                        std::to_string(t.cols) + "], expected [" + std::to_string(T) + ", " +
                                        std::to_string(W) + "]");
    }
    be.to_host(qkv.data(), t);
    // As the forward pass scales the scores (session.cpp), in double.
    double scale = c.scale_attn_weights ? 1.0 / std::sqrt(double(D)) : 1.0;
    if (c.scale_attn_by_inverse_layer_idx) scale /= double(layer + 1);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv_head = h / group;
      float* out = maps.probs.data() + (layer * H + h) * T * T;
      for (int64_t i = 0; i < T; ++i) {
        const float* q = qkv.data() + i * W + h * D;
        double max = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const float* k = qkv.data() + j * W + H * D + kv_head * D;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(q[d]) * double(k[d]);
          scores[size_t(j)] = dot * scale;
          max = std::max(max, scores[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += scores[size_t(j)] = std::exp(scores[size_t(j)] - max);
        if (!std::isfinite(sum)) {
          throw Error(ErrorKind::Numeric, "attention maps: the scores of layer " + std::to_string(layer) +
                                              ", head " + std::to_string(h) + ", query " + std::to_string(i) +
                                              " are not finite");
        }
        for (int64_t j = 0; j <= i; ++j) out[i * T + j] = float(scores[size_t(j)] / sum);
      }
    }
    ++layers_seen;
  });
  session.eval(tokens);
  if (layers_seen != c.n_layer) {
    throw Error(ErrorKind::Shape, "attention maps: saw " + std::to_string(layers_seen) + " of " +
                                      std::to_string(c.n_layer) + " layers");
  }
  return maps;
}

}  // namespace minigpt
