// The hyper-parameters of a decoder-only transformer, model-neutral: each architecture's parser
// (src/arch/) fills them from its Hugging Face config.json, and the forward pass reads only these.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace minigpt {

// gelu_new / gelu_pytorch_tanh, gelu, relu, silu (x * sigmoid(x), a gated FFN's usual gate)
enum class Activation { GeluTanh, GeluErf, Relu, Silu };
enum class PositionEncoding { Learned, Sinusoidal, Rotary };
// A norm's kind: LayerNorm, out = (x - mean) / sqrt(var + eps) * w + b; or RMSNorm (Llama's), out = x /
// sqrt(mean(x^2) + eps) * w (+ b where the model has one): no mean subtracted.
enum class NormKind { Layer, Rms };
// The MLP's kind: plain, down(act(up(x))); or gated (SwiGLU, GeGLU), down(act(gate(x)) * up(x)) with gate
// and up one fused linear layer of 2 n_inner outputs, the gate's first.
enum class FfnKind { Plain, Gated };
// Which dimensions of a head rotary positions rotate together, for pair i < rotary_dim / 2: (i, i +
// rotary_dim / 2), GPT-NeoX's and transformers' rotate_half; or (2i, 2i + 1), GPT-J's rotate_every_two and
// llama.cpp's rope on its permuted Llama q and k.
enum class RopeLayout { NeoxHalves, AdjacentPairs };
// How the rotary frequencies are rescaled for a longer context (transformers' rope_type): none; linear,
// every inverse frequency divided by `factor`; llama3 (Llama 3.1's), the low frequencies divided by
// `factor`, the high ones kept and those between interpolated (transformers' _compute_llama3_parameters);
// longrope (Phi-3's, _compute_longrope_parameters), inverse frequency i divided by short_factor[i] for a
// context of at most original_context positions and by long_factor[i] beyond, and cos and sin multiplied by
// attention_factor.
enum class RopeScalingKind { None, Linear, Llama3, LongRope };
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int64_t original_context = 0;   // llama3, longrope: original_max_position_embeddings
  // longrope: rotary_dim / 2 divisors each; the multiplier of cos and sin (its default from the contexts'
  // ratio is the parser's to compute).
  std::vector<float> short_factor, long_factor;
  float attention_factor = 1.0f;
};

// The model_type of a Config made field by field: the first of the architecture table (src/arch/arch.cpp).
const char* default_arch();

struct Config {
  std::string arch = default_arch();  // the architecture (Hugging Face model_type) that describes the tensors
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head =
      0;  // key/value heads: n_head (multi-head), 1 (multi-query) or a divisor (grouped); 0 = n_head
  int64_t n_embd = 0;                            // C: the residual width
  int64_t n_ctx = 0;                             // the longest sequence the model accepts (n_positions)
  int64_t n_vocab = 0;                           // vocab_size
  int64_t n_inner = 0;                           // the MLP's hidden width
  float layer_norm_epsilon = 1e-5f;              // every norm's eps, whatever its kind
  Activation activation = Activation::GeluTanh;  // the MLP's (a gated MLP's gate's)
  std::string activation_name = "gelu_new";
  // The block, as the forward pass (src/session/session.cpp) assembles it from the backend's ops: each family
  // says what its blocks are here (src/arch/<family>.cpp), and the forward pass reads only these fields.
  // The kind of every norm (the blocks' and the output norm).
  NormKind norm = NormKind::Layer;
  // Plain or gated MLP (FfnUp then has 2 n_inner outputs: gate | up).
  FfnKind ffn = FfnKind::Plain;
  // The block's residuals: x += attn(ln_1(x)); x += mlp(ln_2(x)) (sequential), or x += attn(ln_1(x)) +
  // mlp(ln_2(x)) with both norms of the same x (parallel, GPT-J / GPT-NeoX).
  bool parallel_residual = false;
  // Where the block's layer norms sit: before attention and MLP (pre-norm, GPT-2), or after each residual
  // add (post-norm, OPT-350m's do_layer_norm_before = false): x = ln_1(x + attn(x)); x = ln_2(x + mlp(x)).
  bool pre_norm = true;
  // Whether a layer norm follows the last block (GPT-2: ln_f). OPT's post-norm models have none.
  bool output_norm = true;
  // The width of the token embeddings and of the LM head's input (OPT's word_embed_proj_dim); 0 = n_embd.
  // When it differs from n_embd, project_in (E -> C) follows the embedding lookup and project_out (C -> E)
  // precedes the head.
  int64_t n_embd_io = 0;
  // Learned positions: row p + pos_offset of the table is position p (OPT keeps 2 unused rows first).
  int64_t pos_offset = 0;
  PositionEncoding position_encoding = PositionEncoding::Learned;
  // Rotary: the leading rotary_dim dimensions of each query and key head are rotated, pair i < rotary_dim / 2
  // (dimensions i and i + rotary_dim / 2, GPT-NeoX's rotate_half, or 2i and 2i + 1: rope_layout) by the
  // angle position * rope_theta^(-2i / rotary_dim); the rest pass through.
  int64_t rotary_dim = 0;
  float rope_theta = 10000.0f;
  RopeLayout rope_layout = RopeLayout::NeoxHalves;  // which dimensions rotate together (rotate_half above)
  RopeScaling rope_scaling;                         // the frequencies' rescaling (none by default)
  // Per-pair divisors of the rotary frequencies, as llama.cpp's rope_freqs tensor holds them (its converter
  // writes Llama 3's rope_scaling so): inverse frequency i is 1 / rope_theta^(2i / rotary_dim) /
  // rope_freq_factors[i]. Empty: none (rope_scaling applies).
  std::vector<float> rope_freq_factors;
  // The width of a query/key/value head; 0: n_embd / n_head. Llama-shaped models may set it apart (Qwen3:
  // 128 for 1024 / 16), so that H * head_dim need not equal n_embd.
  int64_t n_head_dim = 0;
  // Sliding-window attention (Mistral): a query at position p sees keys p - sliding_window + 1 .. p only,
  // at any context length. 0: no window (every earlier position).
  int64_t sliding_window = 0;
  // A per-head RMSNorm of each query and key head (weights [head_dim], shared by the heads) before the
  // rotary positions (Qwen3's q_norm, k_norm).
  bool qk_norm = false;
  // The attention's score scale where a family sets it apart from 1 / sqrt(head_dim) (Gemma's
  // query_pre_attn_scalar^-1/2); 0: scale_attn_weights decides.
  float attn_scale = 0.0f;
  // Soft-capping (Gemma 2): attention scores become cap * tanh(scores / cap) before the softmax, and the
  // final logits likewise with their own cap. 0: none.
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // Gemma's "sandwich" norms: each half's output is normalized (post_attention_layernorm,
  // post_feedforward_layernorm) before it joins the residual stream; the pre-norms are then
  // input_layernorm and pre_feedforward_layernorm.
  bool post_norms = false;
  // Added to every norm weight at load: Gemma's RMSNorm multiplies by (1 + w) and its checkpoints store w
  // (1), while llama.cpp's converter writes 1 + w into its GGUF files (0).
  float norm_shift = 0.0f;
  // The token embeddings times this before the first layer (Gemma: sqrt(n_embd)); 0: none.
  float embed_scale = 0.0f;
  // Per-layer windows (Gemma 2 and 3's layer_types): layer l's window is layer_window[l] (0: none). Empty:
  // every layer has sliding_window.
  std::vector<int64_t> layer_window;
  // The rotary base of the layers with a window, which take no rope_scaling (Gemma 3's
  // rope_local_base_freq); 0: as the other layers.
  float rope_theta_local = 0.0f;
  // Per-layer rotary positions (SmolLM3's no_rope_layers): layer l rotates q and k when rope_layers[l] is
  // 1, and has no positions at all when 0. Empty: every layer rotates.
  std::vector<uint8_t> rope_layers;
  bool scale_attn_weights = true;                // scores /= sqrt(head_dim)
  bool scale_attn_by_inverse_layer_idx = false;  // scores /= (layer + 1)
  bool tie_word_embeddings = true;               // the LM head is the token embedding matrix
  bool attn_bias = true;  // the attention projections have biases (GPT-NeoX attention_bias, OPT enable_bias)
  bool mlp_bias = true;   // the MLP's two linear layers have biases (OPT enable_bias)
  // -1: the model has none. transformers accepts ids outside the vocabulary (its default 50256 in a small
  // model's config), so these may be >= n_vocab; whoever uses them checks.
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  // Every id of config.json's eos_token_id, which may be a list (transformers stops at any of them);
  // eos_token_id is the first. A config made otherwise (GGUF metadata, a random model) may leave it empty:
  // then eos_token_id alone.
  std::vector<int64_t> eos_token_ids;

  int64_t head_dim() const { return n_head_dim > 0 ? n_head_dim : n_embd / n_head; }
  int64_t embd_io() const { return n_embd_io > 0 ? n_embd_io : n_embd; }
  bool projects_io() const { return embd_io() != n_embd; }
  int64_t q_dim() const { return n_head * head_dim(); }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t kv_dim() const { return kv_heads() * head_dim(); }
  // The width of the MLP's first linear layer's output: n_inner, or gate | up for a gated MLP.
  int64_t ffn_up_width() const { return ffn == FfnKind::Gated ? 2 * n_inner : n_inner; }
  // The window of layer l (layer_window, else sliding_window).
  int64_t window_of(int64_t l) const {
    return layer_window.empty() ? sliding_window : layer_window[size_t(l)];
  }
  // The rotary inverse frequencies, rotary_dim / 2 of them, as transformers computes them in F32: 1 /
  // rope_theta^(2i / rotary_dim), then rope_scaling applied (a longrope's long factors where
  // `long_context`, its short ones otherwise).
  std::vector<float> rope_inv_freq(bool long_context = false) const;
  // Throws Error(Config) naming `source` when the values are inconsistent or out of range, and
  // Error(Unsupported) for a variant the forward pass does not implement yet.
  void validate(const std::string& source) const;
};

// Parses config.json text: its model_type picks the architecture, whose parser fills the config; an
// unknown model_type is refused by name. `source` names the file in error messages.
Config parse_config(const std::string& json_text, const std::string& source);
Config load_config(const std::filesystem::path& path);
// The config.json transformers would write for these values (for tests and tools).
std::string config_to_json(const Config& c);

}  // namespace minigpt
