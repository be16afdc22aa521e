// Model configuration from a Hugging Face config.json, normalized across transformers 4 and 5 spellings:
//   RoPE: v5 `rope_parameters` (one dict, or for Gemma 3 a dict keyed by layer type) or v4 `rope_theta` +
//         `rope_scaling` (+ Gemma's `rope_local_base_freq` for sliding layers; v4 rope_scaling applies to the
//         global layers only).
//   Layer kinds: `layer_types` or Gemma's `sliding_window_pattern` / `_sliding_window_pattern` (every N-th
//         layer global), Qwen's use_sliding_window + max_window_layers.
// Multimodal configs (gemma3 with text_config) are read from their text_config.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace flashkit::engine {

enum class Arch { gemma3, llama, qwen2, qwen3, mamba };

struct RopeConfig {
  std::string type = "default";  // default | linear | llama3 | (dynamic, yarn: rejected)
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  double original_max_position = 8192;
  double attention_factor = 1.0;  // multiplies cos/sin
};

// Mamba-1 (model_type "mamba"): the selective-SSM mixer that replaces attention + MLP in every layer.
struct SsmConfig {
  int64_t d_inner = 0;      // expand * hidden_size (intermediate_size)
  int64_t state_size = 0;   // d_state
  int64_t conv_kernel = 0;  // causal conv1d width
  int64_t dt_rank = 0;      // time_step_rank ("auto": ceil(hidden_size / 16))
  bool conv_bias = true;    // use_conv_bias
  bool proj_bias = false;   // use_bias (in_proj / out_proj)
};

struct ModelConfig {
  Arch arch = Arch::llama;
  std::string model_type;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-6;
  std::string activation;          // gelu_tanh | silu
  bool norm_plus_one = false;      // Gemma: x * (1 + w)
  bool qk_norm = false;            // Gemma 3, Qwen3
  bool sandwich_norms = false;     // Gemma: post-attention / pre- and post-feedforward norms
  bool attention_bias = false;     // q/k/v biases (Qwen2 always)
  bool o_bias = false;             // o_proj bias (attention_bias outside Qwen2)
  bool tie_embeddings = false;
  double embed_scale = 1.0;        // Gemma: sqrt(hidden)
  double attn_scale = 0;           // query scaling (head_dim^-0.5 or query_pre_attn_scalar^-0.5)
  double attn_softcap = 0, final_softcap = 0;
  double attn_softcap_ignored = 0;  // Gemma 3: written in config.json, not applied (as in transformers)
  int64_t sliding_window = 0;
  std::vector<bool> layer_sliding;  // per layer
  RopeConfig rope_global, rope_local;
  int64_t max_position = 0;
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;
  std::string torch_dtype;         // as written (may be empty)
  SsmConfig ssm;                   // Arch::mamba only (num_heads etc. are 0 there)
};

// The one config validator (generate, cost, the APIs, GGUF metadata): throws invalid_argument naming the file and
// the key for anything missing, malformed, unsupported or outside the accepted range (src/core/limits.hpp; the
// message gives the range).
ModelConfig parse_config(const nlohmann::json& j, const std::string& where);
// The Mamba part of parse_config (config_mamba.cpp): `j` is the config object, model_type "mamba".
ModelConfig parse_mamba_config(const nlohmann::json& j, const std::string& where);
// DIR/config.json or the file itself, read through core/json_io (size and nesting bounded).
ModelConfig load_config(const std::filesystem::path& dir_or_file);

// Number of weights (parameters) of the model the config describes, with overflow-checked arithmetic.
int64_t weight_count(const ModelConfig& c);
// Throws out_of_memory, naming `what`, the bytes needed and the bytes available, when weight_count(c) x
// bytes_per_weight exceeds the host memory available now (core/host_memory.hpp). Called before allocating.
void check_fits_host_memory(const ModelConfig& c, int64_t bytes_per_weight, const std::string& what);

// The per-layer RoPE inverse frequencies (head_dim / 2 values) transformers computes for `rc`.
std::vector<float> rope_inv_freq(const RopeConfig& rc, int64_t head_dim);

const char* arch_name(Arch a);

}  // namespace flashkit::engine
