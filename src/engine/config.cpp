// config.json -> ModelConfig (see config.hpp for the accepted spellings).
#include "engine/config.hpp"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "flashkit/error.hpp"

namespace flashkit::engine {

using nlohmann::json;

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::gemma3: return "gemma3_text";
    case Arch::llama: return "llama";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen3: return "qwen3";
  }
  return "?";
}

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  fail(Status::invalid_argument, where + ": " + what);
}

bool has(const json& j, const char* k) { return j.contains(k) && !j[k].is_null(); }

int64_t get_int(const json& j, const char* k, const std::string& where, bool required = true, int64_t def = 0) {
  if (!has(j, k)) {
    if (required) bad(where, std::string("missing \"") + k + "\"");
    return def;
  }
  if (!j[k].is_number_integer() && !(j[k].is_number() && std::floor(j[k].get<double>()) == j[k].get<double>()))
    bad(where, std::string("\"") + k + "\" must be an integer");
  if (!j[k].is_number_integer() && std::fabs(j[k].get<double>()) > 9.0e15)  // beyond exact doubles: no cast UB
    bad(where, std::string("\"") + k + "\" is out of range");
  int64_t v = j[k].is_number_integer() ? j[k].get<int64_t>() : int64_t(j[k].get<double>());
  return v;
}

double get_num(const json& j, const char* k, const std::string& where, double def) {
  if (!has(j, k)) return def;
  if (!j[k].is_number()) bad(where, std::string("\"") + k + "\" must be a number");
  return j[k].get<double>();
}

int64_t positive(int64_t v, const char* k, const std::string& where) {
  if (v <= 0 || v > (int64_t(1) << 31)) bad(where, std::string("\"") + k + "\" must be a positive integer, got " + std::to_string(v));
  return v;
}

RopeConfig parse_rope(const json& r, double theta_default, const std::string& where) {
  RopeConfig rc;
  rc.theta = theta_default;
  if (r.is_null()) return rc;
  if (!r.is_object()) bad(where, "rope parameters must be an object");
  rc.theta = get_num(r, "rope_theta", where, theta_default);
  std::string type = "default";
  if (has(r, "rope_type")) type = r["rope_type"].get<std::string>();
  else if (has(r, "type")) type = r["type"].get<std::string>();
  rc.type = type;
  if (type == "default") {
  } else if (type == "linear") {
    rc.factor = get_num(r, "factor", where, 1.0);
  } else if (type == "llama3") {
    rc.factor = get_num(r, "factor", where, 1.0);
    rc.low_freq_factor = get_num(r, "low_freq_factor", where, 1.0);
    rc.high_freq_factor = get_num(r, "high_freq_factor", where, 4.0);
    rc.original_max_position = get_num(r, "original_max_position_embeddings", where, 8192);
    if (rc.high_freq_factor == rc.low_freq_factor) bad(where, "llama3 rope: high_freq_factor == low_freq_factor");
  } else {
    bad(where, "unsupported rope_type \"" + type + "\" (supported: default, linear, llama3)");
  }
  if (!(rc.theta > 0) || !(rc.factor > 0)) bad(where, "rope_theta and factor must be positive");
  return rc;
}

std::vector<int32_t> id_list(const json& j) {
  std::vector<int32_t> out;
  if (j.is_number_integer()) out.push_back(j.get<int32_t>());
  else if (j.is_array())
    for (auto& e : j)
      if (e.is_number_integer()) out.push_back(e.get<int32_t>());
  return out;
}

}  // namespace

ModelConfig parse_config(const json& root, const std::string& where) {
  if (!root.is_object()) bad(where, "not a JSON object");
  const json& j = (root.contains("text_config") && root["text_config"].is_object()) ? root["text_config"] : root;
  ModelConfig c;
  if (!has(j, "model_type") || !j["model_type"].is_string()) {
    if (!has(root, "model_type") || !root["model_type"].is_string()) bad(where, "missing \"model_type\"");
  }
  c.model_type = (has(j, "model_type") ? j : root)["model_type"].get<std::string>();
  if (c.model_type == "gemma3_text" || c.model_type == "gemma3") c.arch = Arch::gemma3;
  else if (c.model_type == "llama") c.arch = Arch::llama;
  else if (c.model_type == "qwen2") c.arch = Arch::qwen2;
  else if (c.model_type == "qwen3") c.arch = Arch::qwen3;
  else bad(where, "unsupported model_type \"" + c.model_type + "\" (supported: gemma3_text, llama, qwen2, qwen3)");

  c.vocab_size = positive(get_int(j, "vocab_size", where), "vocab_size", where);
  c.hidden_size = positive(get_int(j, "hidden_size", where), "hidden_size", where);
  c.intermediate_size = positive(get_int(j, "intermediate_size", where), "intermediate_size", where);
  c.num_layers = positive(get_int(j, "num_hidden_layers", where), "num_hidden_layers", where);
  c.num_heads = positive(get_int(j, "num_attention_heads", where), "num_attention_heads", where);
  c.num_kv_heads = positive(get_int(j, "num_key_value_heads", where, false, c.num_heads), "num_key_value_heads", where);
  if (c.num_heads % c.num_kv_heads) bad(where, "num_attention_heads must be a multiple of num_key_value_heads");
  int64_t hd_default = c.hidden_size / c.num_heads;
  c.head_dim = positive(get_int(j, "head_dim", where, false, hd_default), "head_dim", where);
  if (c.head_dim % 2) bad(where, "head_dim must be even");
  c.rms_norm_eps = get_num(j, "rms_norm_eps", where, 1e-6);
  c.max_position = get_int(j, "max_position_embeddings", where, false, 8192);
  if (c.max_position <= 0) c.max_position = 8192;
  if (has(j, "torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"].get<std::string>();
  else if (has(j, "dtype") && j["dtype"].is_string()) c.torch_dtype = j["dtype"].get<std::string>();
  if (has(j, "bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_id = j["bos_token_id"].get<int32_t>();
  if (has(j, "eos_token_id")) c.eos_ids = id_list(j["eos_token_id"]);

  std::string act;
  if (has(j, "hidden_activation") && j["hidden_activation"].is_string()) act = j["hidden_activation"].get<std::string>();
  else if (has(j, "hidden_act") && j["hidden_act"].is_string()) act = j["hidden_act"].get<std::string>();
  if (act.empty()) act = c.arch == Arch::gemma3 ? "gelu_pytorch_tanh" : "silu";
  if (act == "gelu_pytorch_tanh" || act == "gelu_tanh" || act == "gelu_new" || act == "gelu_fast") c.activation = "gelu_tanh";
  else if (act == "silu" || act == "swish") c.activation = "silu";
  else bad(where, "unsupported activation \"" + act + "\" (supported: gelu_pytorch_tanh, silu)");

  bool tie_default = c.arch == Arch::gemma3;
  c.tie_embeddings = has(j, "tie_word_embeddings") ? j["tie_word_embeddings"].get<bool>()
                     : has(root, "tie_word_embeddings") ? root["tie_word_embeddings"].get<bool>() : tie_default;
  // Qwen2 always has q/k/v biases (its configs do not say so); Llama / Gemma / Qwen3 follow attention_bias, which
  // (as in transformers) puts biases on q, k, v and o.
  c.attention_bias = c.arch == Arch::qwen2 || (has(j, "attention_bias") && j["attention_bias"].get<bool>());
  c.o_bias = c.arch != Arch::qwen2 && c.attention_bias;
  if (has(j, "mlp_bias") && j["mlp_bias"].is_boolean() && j["mlp_bias"].get<bool>())
    bad(where, "\"mlp_bias\": true is not supported");
  c.attn_scale = 1.0 / std::sqrt(double(c.head_dim));
  c.attn_softcap = get_num(j, "attn_logit_softcapping", where, 0.0);
  c.final_softcap = get_num(j, "final_logit_softcapping", where, 0.0);
  if (c.attn_softcap < 0 || c.final_softcap < 0) bad(where, "soft-capping values must be >= 0");

  if (c.arch == Arch::gemma3) {
    c.norm_plus_one = true;
    c.qk_norm = true;
    c.sandwich_norms = true;
    c.embed_scale = std::sqrt(double(c.hidden_size));
    double qs = get_num(j, "query_pre_attn_scalar", where, double(c.head_dim));
    if (!(qs > 0)) bad(where, "query_pre_attn_scalar must be positive");
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
    int64_t pattern = has(j, "sliding_window_pattern") ? get_int(j, "sliding_window_pattern", where)
                      : has(j, "_sliding_window_pattern") ? get_int(j, "_sliding_window_pattern", where) : 6;
    if (pattern <= 0) bad(where, "sliding_window_pattern must be positive");
    for (int64_t i = 0; i < c.num_layers; ++i) c.layer_sliding[size_t(i)] = (i + 1) % pattern != 0;
  } else if ((c.arch == Arch::qwen2 || c.arch == Arch::qwen3) && has(j, "use_sliding_window") &&
             j["use_sliding_window"].get<bool>()) {
    int64_t mwl = get_int(j, "max_window_layers", where, false, c.num_layers);
    for (int64_t i = mwl; i < c.num_layers; ++i) c.layer_sliding[size_t(i)] = true;
  }
  bool any_sliding = false;
  for (bool s : c.layer_sliding) any_sliding |= s;
  if (c.arch == Arch::qwen2 || c.arch == Arch::qwen3) {
    if (!(has(j, "use_sliding_window") && j["use_sliding_window"].get<bool>()))
      c.layer_sliding.assign(size_t(c.num_layers), false), any_sliding = false;
  }
  if (any_sliding && c.sliding_window <= 0) bad(where, "sliding layers need a positive \"sliding_window\"");
  if (!any_sliding) c.sliding_window = 0;

  // RoPE.
  double theta = get_num(j, "rope_theta", where, 10000.0);
  if (has(j, "rope_parameters")) {
    const json& rp = j["rope_parameters"];
    if (rp.is_object() && (rp.contains("full_attention") || rp.contains("sliding_attention"))) {
      c.rope_global = parse_rope(rp.value("full_attention", json()), theta, where + ": rope_parameters.full_attention");
      c.rope_local = rp.contains("sliding_attention")
                         ? parse_rope(rp["sliding_attention"], get_num(j, "rope_local_base_freq", where, 10000.0),
                                      where + ": rope_parameters.sliding_attention")
                         : c.rope_global;
    } else {
      c.rope_global = parse_rope(rp, theta, where + ": rope_parameters");
      c.rope_local = c.rope_global;
    }
  } else {
    c.rope_global = parse_rope(has(j, "rope_scaling") ? j["rope_scaling"] : json(), theta, where + ": rope_scaling");
    if (c.arch == Arch::gemma3) {
      c.rope_local = RopeConfig{};
      c.rope_local.theta = get_num(j, "rope_local_base_freq", where, 10000.0);
    } else {
      c.rope_local = c.rope_global;
    }
  }
  return c;
}

ModelConfig load_config(const std::filesystem::path& dir_or_file) {
  namespace fs = std::filesystem;
  fs::path p = dir_or_file;
  std::error_code ec;
  if (!fs::exists(p, ec)) fail(Status::invalid_argument, p.string() + ": no such file or directory");
  if (fs::is_directory(p, ec)) p /= "config.json";
  std::ifstream f(p);
  if (!f) fail(Status::invalid_argument, p.string() + ": cannot open (a model directory needs config.json)");
  json j;
  try {
    j = json::parse(f);
  } catch (const std::exception& e) {
    fail(Status::invalid_argument, p.string() + ": invalid JSON: " + e.what());
  }
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
