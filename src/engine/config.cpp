// config.json -> ModelConfig (see config.hpp for the accepted spellings).
#include "engine/config.hpp"

#include <cmath>
#include <iomanip>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/checked.hpp"
#include "core/host_memory.hpp"
#include "core/json_io.hpp"
#include "core/limits.hpp"
#include "flashkit/error.hpp"

namespace flashkit::engine {

using nlohmann::json;

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::gemma3: return "gemma3_text";
    case Arch::llama: return "llama";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen3: return "qwen3";
    case Arch::mamba: return "mamba";
  }
  return "?";
}

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  fail(Status::invalid_argument, where + ": " + what);
}

bool has(const json& j, const char* k) { return j.contains(k) && !j[k].is_null(); }

// A JSON value for a message: short, whatever it is.
std::string shown(const json& v) {
  if (v.is_structured()) return v.is_array() ? "an array" : "an object";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

std::string range_str(double lo, double hi) {
  std::ostringstream o;
  o << "[" << lo << ", " << hi << "]";
  return o.str();
}

int64_t get_int(const json& j, const char* k, const std::string& where, bool required = true, int64_t def = 0) {
  if (!has(j, k)) {
    if (required) bad(where, std::string("missing \"") + k + "\"");
    return def;
  }
  const json& v = j[k];
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    bad(where, std::string("\"") + k + "\" is out of range: " + shown(v));
  if (!v.is_number_integer() && !(v.is_number() && std::floor(v.get<double>()) == v.get<double>()))
    bad(where, std::string("\"") + k + "\" must be an integer, got " + shown(v));
  if (!v.is_number_integer() && std::fabs(v.get<double>()) > 9.0e15)  // beyond exact doubles: no cast UB
    bad(where, std::string("\"") + k + "\" is out of range: " + shown(v));
  return v.is_number_integer() ? v.get<int64_t>() : int64_t(v.get<double>());
}

// An integer field that must lie in [lo, hi] (a model dimension, a count); the message names the range.
int64_t int_in(const json& j, const char* k, const std::string& where, int64_t lo, int64_t hi, bool required = true,
               int64_t def = 0) {
  const int64_t v = get_int(j, k, where, required, def);
  if (v < lo || v > hi)
    bad(where, std::string("\"") + k + "\" must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "], got " + std::to_string(v));
  return v;
}

double get_num(const json& j, const char* k, const std::string& where, double def) {
  if (!has(j, k)) return def;
  if (!j[k].is_number()) bad(where, std::string("\"") + k + "\" must be a number, got " + shown(j[k]));
  return j[k].get<double>();
}

// A float field that must lie in [lo, hi] (or be `off`, e.g. 0 for "no soft-capping").
double num_in(const json& j, const char* k, const std::string& where, double lo, double hi, double def,
              std::optional<double> off = std::nullopt) {
  const double v = get_num(j, k, where, def);
  if (off && v == *off) return v;
  if (!(v >= lo && v <= hi)) {  // also catches NaN / inf
    std::ostringstream got;
    got << v;
    bad(where, std::string("\"") + k + "\" must be in " + range_str(lo, hi) +
                   (off ? " (or " + std::to_string(int(*off)) + " for off)" : std::string()) + ", got " + got.str());
  }
  return v;
}

bool get_bool(const json& j, const char* k, const std::string& where, bool def) {
  if (!has(j, k)) return def;
  if (!j[k].is_boolean()) bad(where, std::string("\"") + k + "\" must be true or false, got " + shown(j[k]));
  return j[k].get<bool>();
}

std::string get_string(const json& j, const char* k, const std::string& where, const std::string& def) {
  if (!has(j, k)) return def;
  if (!j[k].is_string()) bad(where, std::string("\"") + k + "\" must be a string, got " + shown(j[k]));
  return j[k].get<std::string>();
}

RopeConfig parse_rope(const json& r, double theta_default, const std::string& where) {
  namespace L = limits;
  RopeConfig rc;
  rc.theta = theta_default;
  if (r.is_null()) return rc;
  if (!r.is_object()) bad(where, "rope parameters must be an object");
  rc.theta = num_in(r, "rope_theta", where, L::kMinRopeTheta, L::kMaxRopeTheta, theta_default);
  std::string type = "default";
  if (has(r, "rope_type")) type = get_string(r, "rope_type", where, type);
  else if (has(r, "type")) type = get_string(r, "type", where, type);
  rc.type = type;
  if (type == "default") {
  } else if (type == "linear") {
    rc.factor = num_in(r, "factor", where, L::kMinRopeFactor, L::kMaxRopeFactor, 1.0);
  } else if (type == "llama3") {
    rc.factor = num_in(r, "factor", where, L::kMinRopeFactor, L::kMaxRopeFactor, 1.0);
    rc.low_freq_factor = num_in(r, "low_freq_factor", where, L::kMinRopeFreqFactor, L::kMaxRopeFreqFactor, 1.0);
    rc.high_freq_factor = num_in(r, "high_freq_factor", where, L::kMinRopeFreqFactor, L::kMaxRopeFreqFactor, 4.0);
    rc.original_max_position =
        double(int_in(r, "original_max_position_embeddings", where, 1, L::kMaxPositions, false, 8192));
    if (rc.high_freq_factor == rc.low_freq_factor) bad(where, "llama3 rope: high_freq_factor == low_freq_factor");
  } else {
    bad(where, "unsupported rope_type \"" + type + "\" (supported: default, linear, llama3)");
  }
  return rc;
}

// Token ids (one integer or a list); each must be a valid int32 id.
std::vector<int32_t> id_list(const json& j, const char* k, const std::string& where) {
  std::vector<int32_t> out;
  auto one = [&](const json& e) {
    if (!e.is_number_integer()) return;  // null / junk entries are ignored, as before
    if (e.is_number_unsigned() ? e.get<uint64_t>() > uint64_t(INT32_MAX)
                               : (e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX))
      bad(where, std::string("\"") + k + "\" holds " + shown(e) + ", expected token ids in [0, 2^31)");
    out.push_back(int32_t(e.get<int64_t>()));
  };
  if (j.is_array())
    for (const auto& e : j) one(e);
  else
    one(j);
  return out;
}

}  // namespace

ModelConfig parse_config(const json& root, const std::string& where) {
  namespace L = limits;
  if (!root.is_object()) bad(where, "not a JSON object");
  const json& j = (root.contains("text_config") && root["text_config"].is_object()) ? root["text_config"] : root;
  ModelConfig c;
  const json& typed = (has(j, "model_type") && j["model_type"].is_string()) ? j : root;
  if (!has(typed, "model_type") || !typed["model_type"].is_string()) bad(where, "missing \"model_type\"");
  c.model_type = typed["model_type"].get<std::string>();
  if (c.model_type == "mamba") return parse_mamba_config(j, where);
  if (c.model_type == "gemma3_text" || c.model_type == "gemma3") c.arch = Arch::gemma3;
  else if (c.model_type == "llama") c.arch = Arch::llama;
  else if (c.model_type == "qwen2") c.arch = Arch::qwen2;
  else if (c.model_type == "qwen3") c.arch = Arch::qwen3;
  else bad(where, "unsupported model_type \"" + c.model_type + "\" (supported: gemma3_text, llama, qwen2, qwen3, mamba)");

  // Dimensions: bounded (core/limits.hpp) so that every size product below and in the engine fits in 64 bits.
  c.vocab_size = int_in(j, "vocab_size", where, 1, L::kMaxVocab);
  c.hidden_size = int_in(j, "hidden_size", where, 1, L::kMaxHiddenSize);
  c.intermediate_size = int_in(j, "intermediate_size", where, 1, L::kMaxIntermediateSize);
  c.num_layers = int_in(j, "num_hidden_layers", where, 1, L::kMaxLayers);
  c.num_heads = int_in(j, "num_attention_heads", where, 1, L::kMaxHeads);
  c.num_kv_heads = int_in(j, "num_key_value_heads", where, 1, L::kMaxHeads, false, c.num_heads);
  if (c.num_heads % c.num_kv_heads) bad(where, "num_attention_heads must be a multiple of num_key_value_heads");
  if (!has(j, "head_dim") && c.hidden_size % c.num_heads)
    bad(where, "no \"head_dim\" and hidden_size " + std::to_string(c.hidden_size) +
                   " is not a multiple of num_attention_heads " + std::to_string(c.num_heads));
  c.head_dim = int_in(j, "head_dim", where, 2, L::kMaxHeadDim, false, c.hidden_size / c.num_heads);
  if (c.head_dim % 2) bad(where, "\"head_dim\" must be even (RoPE rotates pairs), got " + std::to_string(c.head_dim));
  c.rms_norm_eps = num_in(j, "rms_norm_eps", where, L::kMinRmsNormEps, L::kMaxRmsNormEps, 1e-6);
  c.max_position = get_int(j, "max_position_embeddings", where, false, 8192);
  if (c.max_position <= 0) c.max_position = 8192;  // absent or "unknown" in some configs
  if (c.max_position > L::kMaxPositions)
    bad(where, "\"max_position_embeddings\" must be at most " + std::to_string(L::kMaxPositions) + ", got " +
                   std::to_string(c.max_position));
  if (has(j, "torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"].get<std::string>();
  else if (has(j, "dtype") && j["dtype"].is_string()) c.torch_dtype = j["dtype"].get<std::string>();
  if (has(j, "bos_token_id")) {
    auto ids = id_list(j["bos_token_id"], "bos_token_id", where);
    if (!ids.empty() && j["bos_token_id"].is_number_integer()) c.bos_id = ids[0];
  }
  if (has(j, "eos_token_id")) c.eos_ids = id_list(j["eos_token_id"], "eos_token_id", where);

  std::string act;
  if (has(j, "hidden_activation") && j["hidden_activation"].is_string()) act = j["hidden_activation"].get<std::string>();
  else if (has(j, "hidden_act") && j["hidden_act"].is_string()) act = j["hidden_act"].get<std::string>();
  if (act.empty()) act = c.arch == Arch::gemma3 ? "gelu_pytorch_tanh" : "silu";
  if (act == "gelu_pytorch_tanh" || act == "gelu_tanh" || act == "gelu_new" || act == "gelu_fast") c.activation = "gelu_tanh";
  else if (act == "silu" || act == "swish") c.activation = "silu";
  else bad(where, "unsupported activation \"" + act + "\" (supported: gelu_pytorch_tanh, silu)");

  bool tie_default = c.arch == Arch::gemma3;
  c.tie_embeddings = has(j, "tie_word_embeddings") ? get_bool(j, "tie_word_embeddings", where, tie_default)
                                                   : get_bool(root, "tie_word_embeddings", where, tie_default);
  // Qwen2 always has q/k/v biases (its configs do not say so); Llama / Gemma / Qwen3 follow attention_bias, which
  // (as in transformers) puts biases on q, k, v and o.
  c.attention_bias = c.arch == Arch::qwen2 || get_bool(j, "attention_bias", where, false);
  c.o_bias = c.arch != Arch::qwen2 && c.attention_bias;
  if (has(j, "mlp_bias") && j["mlp_bias"].is_boolean() && j["mlp_bias"].get<bool>())
    bad(where, "\"mlp_bias\": true is not supported");
  c.attn_scale = 1.0 / std::sqrt(double(c.head_dim));
  c.attn_softcap = num_in(j, "attn_logit_softcapping", where, L::kMinSoftcap, L::kMaxSoftcap, 0.0, 0.0);
  c.final_softcap = num_in(j, "final_logit_softcapping", where, L::kMinSoftcap, L::kMaxSoftcap, 0.0, 0.0);

  if (c.arch == Arch::gemma3) {
    c.norm_plus_one = true;
    c.qk_norm = true;
    c.sandwich_norms = true;
    c.embed_scale = std::sqrt(double(c.hidden_size));
    double qs = num_in(j, "query_pre_attn_scalar", where, L::kMinQueryPreAttnScalar, L::kMaxQueryPreAttnScalar,
                       double(c.head_dim));
    c.attn_scale = 1.0 / std::sqrt(qs);
    // transformers' Gemma 3 attention never passes attn_logit_softcapping to its attention functions (Gemma 3
    // replaced Gemma 2's soft-capping by q/k norms; released configs set it to null). We follow transformers,
    // whose logits define fidelity: the value is kept for reference but not applied.
    c.attn_softcap_ignored = c.attn_softcap;
    c.attn_softcap = 0;
  } else if (c.arch == Arch::qwen3) {
    c.qk_norm = true;
  }

  // Layer kinds.
  c.layer_sliding.assign(size_t(c.num_layers), false);
  c.sliding_window = has(j, "sliding_window") ? get_int(j, "sliding_window", where) : 0;
  const bool qwen_sliding = (c.arch == Arch::qwen2 || c.arch == Arch::qwen3) &&
                            get_bool(j, "use_sliding_window", where, false);
  if (has(j, "layer_types")) {
    const json& lt = j["layer_types"];
    if (!lt.is_array() || int64_t(lt.size()) != c.num_layers)
      bad(where, "\"layer_types\" must list num_hidden_layers (" + std::to_string(c.num_layers) + ") entries");
    for (size_t i = 0; i < lt.size(); ++i) {
      std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
      if (t == "sliding_attention") c.layer_sliding[i] = true;
      else if (t != "full_attention") bad(where, "layer_types[" + std::to_string(i) + "]: unknown \"" + t + "\"");
    }
  } else if (c.arch == Arch::gemma3) {
    const char* key = has(j, "sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    int64_t pattern = int_in(j, key, where, 1, INT32_MAX, false, 6);
    for (int64_t i = 0; i < c.num_layers; ++i) c.layer_sliding[size_t(i)] = (i + 1) % pattern != 0;
  } else if (qwen_sliding) {
    int64_t mwl = int_in(j, "max_window_layers", where, 0, INT32_MAX, false, c.num_layers);
    for (int64_t i = mwl; i < c.num_layers; ++i) c.layer_sliding[size_t(i)] = true;
  }
  if ((c.arch == Arch::qwen2 || c.arch == Arch::qwen3) && !qwen_sliding) c.layer_sliding.assign(size_t(c.num_layers), false);
  bool any_sliding = false;
  for (bool s : c.layer_sliding) any_sliding |= s;
  if (any_sliding && c.sliding_window <= 0) bad(where, "sliding layers need a positive \"sliding_window\"");
  if (any_sliding && c.sliding_window > L::kMaxSlidingWindow)
    bad(where, "\"sliding_window\" must be an integer in [1, " + std::to_string(L::kMaxSlidingWindow) + "], got " +
                   std::to_string(c.sliding_window));
  if (!any_sliding) c.sliding_window = 0;

  // RoPE.
  double theta = num_in(j, "rope_theta", where, L::kMinRopeTheta, L::kMaxRopeTheta, 10000.0);
  auto local_theta = [&] {
    return num_in(j, "rope_local_base_freq", where, L::kMinRopeTheta, L::kMaxRopeTheta, 10000.0);
  };
  if (has(j, "rope_parameters")) {
    const json& rp = j["rope_parameters"];
    if (rp.is_object() && (rp.contains("full_attention") || rp.contains("sliding_attention"))) {
      c.rope_global = parse_rope(rp.value("full_attention", json()), theta, where + ": rope_parameters.full_attention");
      c.rope_local = rp.contains("sliding_attention")
                         ? parse_rope(rp["sliding_attention"], local_theta(), where + ": rope_parameters.sliding_attention")
                         : c.rope_global;
    } else {
      c.rope_global = parse_rope(rp, theta, where + ": rope_parameters");
      c.rope_local = c.rope_global;
    }
  } else {
    c.rope_global = parse_rope(has(j, "rope_scaling") ? j["rope_scaling"] : json(), theta, where + ": rope_scaling");
    if (c.arch == Arch::gemma3) {
      c.rope_local = RopeConfig{};
      c.rope_local.theta = local_theta();
    } else {
      c.rope_local = c.rope_global;
    }
  }
  weight_count(c);  // every weight-size product representable (throws otherwise)
  return c;
}

// Mamba (transformers' MambaConfig): no attention, no RoPE; every layer is norm -> mixer -> residual add.
ModelConfig parse_mamba_config(const json& j, const std::string& file) {
  namespace L = limits;
  const std::string where = file + " (model_type mamba)";  // every message says which schema was applied
  ModelConfig c;
  c.arch = Arch::mamba;
  c.model_type = "mamba";
  c.vocab_size = int_in(j, "vocab_size", where, 1, L::kMaxVocab);
  c.hidden_size = int_in(j, "hidden_size", where, 1, L::kMaxHiddenSize);
  c.num_layers = int_in(j, "num_hidden_layers", where, 1, L::kMaxLayers);
  SsmConfig& s = c.ssm;
  s.state_size = int_in(j, "state_size", where, 1, 256, false, 16);
  const int64_t expand = int_in(j, "expand", where, 1, 64, false, 2);
  s.d_inner = expand * c.hidden_size;
  if (has(j, "intermediate_size")) {
    const int64_t inter = int_in(j, "intermediate_size", where, 1, L::kMaxIntermediateSize);
    if (inter != s.d_inner)
      bad(where, "\"intermediate_size\" " + std::to_string(inter) + " is not expand (" + std::to_string(expand) +
                     ") x hidden_size (" + std::to_string(c.hidden_size) + ") = " + std::to_string(s.d_inner));
  }
  if (s.d_inner > L::kMaxIntermediateSize)
    bad(where, "expand x hidden_size = " + std::to_string(s.d_inner) + " exceeds the limit of " +
                   std::to_string(L::kMaxIntermediateSize));
  c.intermediate_size = s.d_inner;
  s.conv_kernel = int_in(j, "conv_kernel", where, 1, 16, false, 4);
  if (has(j, "time_step_rank") && j["time_step_rank"].is_string()) {
    if (j["time_step_rank"].get<std::string>() != "auto")
      bad(where, "\"time_step_rank\" must be \"auto\" or an integer, got " + shown(j["time_step_rank"]));
    s.dt_rank = (c.hidden_size + 15) / 16;
  } else {
    s.dt_rank = int_in(j, "time_step_rank", where, 1, s.d_inner, false, (c.hidden_size + 15) / 16);
  }
  s.conv_bias = get_bool(j, "use_conv_bias", where, true);
  s.proj_bias = get_bool(j, "use_bias", where, false);
  get_bool(j, "residual_in_fp32", where, true);  // validated; the residual stream is f32 in flashkit anyway
  c.rms_norm_eps = num_in(j, "layer_norm_epsilon", where, L::kMinRmsNormEps, L::kMaxRmsNormEps, 1e-5);
  c.tie_embeddings = get_bool(j, "tie_word_embeddings", where, true);
  const std::string act = get_string(j, "hidden_act", where, "silu");
  if (act != "silu" && act != "swish") bad(where, "mamba: unsupported \"hidden_act\" \"" + act + "\" (supported: silu)");
  c.activation = "silu";
  c.max_position = L::kMaxPositions;  // no position embeddings: the context is bounded by max_context only
  c.layer_sliding.assign(size_t(c.num_layers), false);
  if (has(j, "torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"].get<std::string>();
  else if (has(j, "dtype") && j["dtype"].is_string()) c.torch_dtype = j["dtype"].get<std::string>();
  if (has(j, "bos_token_id")) {
    auto ids = id_list(j["bos_token_id"], "bos_token_id", where);
    if (!ids.empty() && j["bos_token_id"].is_number_integer()) c.bos_id = ids[0];
  }
  if (has(j, "eos_token_id")) c.eos_ids = id_list(j["eos_token_id"], "eos_token_id", where);
  weight_count(c);
  return c;
}

int64_t weight_count(const ModelConfig& c) {
  const std::string what = "model size (weights)";
  auto mul = [&](int64_t a, int64_t b) { return checked_mul<int64_t>(a, b, what); };
  auto add = [&](int64_t a, int64_t b) { return checked_add<int64_t>(a, b, what); };
  const int64_t H = c.hidden_size, q = mul(c.num_heads, c.head_dim), kv = mul(c.num_kv_heads, c.head_dim);
  if (c.arch == Arch::mamba) {  // in_proj, conv, x_proj, dt_proj, A_log, D, out_proj, norm
    const SsmConfig& s = c.ssm;
    const int64_t Di = s.d_inner;
    int64_t ml = add(mul(2 * Di, H), mul(Di, s.conv_kernel + 1));
    ml = add(ml, add(mul(Di, s.dt_rank + 2 * s.state_size), mul(Di, s.dt_rank + 1)));
    ml = add(ml, add(mul(Di, s.state_size + 1), add(mul(H, Di), H)));
    int64_t total = mul(mul(c.vocab_size, H), c.tie_embeddings ? 1 : 2);
    return add(add(total, mul(ml, c.num_layers)), H);
  }
  int64_t layer = add(add(mul(q, H), mul(2 * kv, H)), mul(H, q));  // q, k, v, o
  layer = add(layer, mul(3 * H, c.intermediate_size));             // gate, up, down
  layer = add(layer, (c.sandwich_norms ? 4 : 2) * H + (c.qk_norm ? 2 * c.head_dim : 0));
  if (c.attention_bias) layer = add(layer, q + 2 * kv + (c.o_bias ? H : 0));
  int64_t total = mul(mul(c.vocab_size, H), c.tie_embeddings ? 1 : 2);
  return add(add(total, mul(layer, c.num_layers)), H);
}

void check_fits_host_memory(const ModelConfig& c, int64_t bytes_per_weight, const std::string& what) {
  const int64_t n = weight_count(c);
  const uint64_t need = uint64_t(checked_mul<int64_t>(n, bytes_per_weight, "model size in bytes"));
  const uint64_t avail = available_host_memory();
  if (need > avail) {
    auto gib = [](uint64_t b) {
      std::ostringstream o;
      o << std::fixed << std::setprecision(1) << double(b) / double(1ull << 30) << " GiB";
      return o.str();
    };
    fail(Status::out_of_memory, what + ": the weights need " + gib(need) + " (" + std::to_string(n) +
                                    " parameters x " + std::to_string(bytes_per_weight) + " bytes each) but only " +
                                    gib(avail) + " of memory are available");
  }
}

ModelConfig load_config(const std::filesystem::path& dir_or_file) {
  namespace fs = std::filesystem;
  fs::path p = dir_or_file;
  std::error_code ec;
  if (!fs::exists(p, ec)) fail(Status::invalid_argument, p.string() + ": no such file or directory");
  if (fs::is_directory(p, ec)) p /= "config.json";
  if (!fs::exists(p, ec))
    fail(Status::invalid_argument, p.string() + ": cannot open (a model directory needs config.json)");
  const json j = json_io::read_json_file(p);
  try {
    return parse_config(j, p.string());
  } catch (const json::exception& e) {
    fail(Status::invalid_argument, p.string() + ": " + e.what());
  }
}

std::vector<float> rope_inv_freq(const RopeConfig& rc, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    float expo = float(2 * i) / float(head_dim);
    inv[size_t(i)] = float(1.0 / std::pow(rc.theta, double(expo)));
  }
  if (rc.type == "linear") {
    for (auto& f : inv) f = float(f / rc.factor);
  } else if (rc.type == "llama3") {
    const double old_ctx = rc.original_max_position;
    const double low_wl = old_ctx / rc.low_freq_factor, high_wl = old_ctx / rc.high_freq_factor;
    for (auto& f : inv) {
      double fi = f;
      double wl = 2 * M_PI / fi;
      double scaled = wl > low_wl ? fi / rc.factor : fi;
      if (!(wl < high_wl) && !(wl > low_wl)) {
        double smooth = (old_ctx / wl - rc.low_freq_factor) / (rc.high_freq_factor - rc.low_freq_factor);
        scaled = (1 - smooth) * scaled / rc.factor + smooth * scaled;
      }
      f = float(scaled);
    }
  }
  return inv;
}

}  // namespace flashkit::engine
