// The CPU side of the GPU fusion demos: kernel lists, byte and launch counts (see gpu_demos.hpp).
#include "gpu_demos.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "flashkit/error.hpp"
#include "model_cost.hpp"

namespace flashkit::analysis {

std::vector<GeluKernel> gelu_separate_kernels() {
  // tanh counted as ~30 FLOPs, as on the CPU (its rational approximation); the GPU uses tanhf.
  return {{"1_cube", 1, 1, 2}, {"2_mul_c1", 1, 1, 1}, {"3_add_x", 2, 1, 1}, {"4_mul_c0", 1, 1, 1},
          {"5_tanh", 1, 1, 30}, {"6_add_1", 1, 1, 1}, {"7_mul_x", 2, 1, 1}, {"8_mul_half", 1, 1, 1}};
}

double gelu_bytes_per_elem(bool fused, double elem_bytes) {
  if (fused) return 2 * elem_bytes;
  int t = 0;
  for (const auto& k : gelu_separate_kernels()) t += k.reads + k.writes;
  return t * elem_bytes;
}

bool DecodeShape::global(int64_t layer) const {
  if (sliding_window <= 0) return true;
  if (!layer_is_global.empty()) return layer_is_global[size_t(layer) % layer_is_global.size()];
  return (layer + 1) % 6 == 0;  // Gemma 3: 5 sliding, then 1 global
}

int64_t DecodeShape::keys(int64_t layer) const {
  return global(layer) ? context : std::min(context, sliding_window);
}

DecodeShape decode_shape_from_config(const ModelConfig& c, int64_t context) {
  DecodeShape s;
  s.name = c.name;
  s.hidden = c.hidden, s.intermediate = c.intermediate, s.layers = c.layers, s.heads = c.heads;
  s.kv_heads = c.kv_heads, s.head_dim = c.head_dim, s.sliding_window = c.sliding_window;
  s.layer_is_global = c.layer_is_global;
  s.qk_norm = c.qk_norm, s.sandwich_norm = c.sandwich_norm, s.gated_mlp = c.gated_mlp;
  s.context = context;
  return s;
}

void validate_decode_shape(const DecodeShape& s) {
  auto bad = [](const std::string& m) { fail(Status::invalid_argument, "decode demo: " + m); };
  for (auto [v, n] : {std::pair{s.hidden, "hidden"}, {s.intermediate, "intermediate"}, {s.layers, "layers"},
                      {s.heads, "heads"}, {s.kv_heads, "kv_heads"}, {s.head_dim, "head_dim"}, {s.context, "context"}})
    if (v <= 0) bad(std::string(n) + " must be positive, got " + std::to_string(v));
  if (s.heads % s.kv_heads) bad("heads must be a multiple of kv_heads");
  if (s.head_dim % 32 || s.head_dim > 1024) bad("head_dim must be a multiple of 32 up to 1024");
  if (s.context > 131072) bad("context must be at most 131072");
}

std::vector<DecodeLaunch> decode_layer_launches(const DecodeShape& s, int64_t layer) {
  const double h = double(s.hidden), I = double(s.intermediate), qd = double(s.heads * s.head_dim),
               kd = double(s.kv_heads * s.head_dim), keys = double(s.keys(layer));
  std::vector<DecodeLaunch> v;
  // GEMV y[out] (f32) = W[out, in] (bf16) x[in] (bf16)
  auto gemv = [&](const char* n, double in, double out) {
    v.push_back({n, "cublas", in * out * 2 + in * 2 + out * 4, 2 * in * out});
  };
  auto norm = [&](const char* n, double out_bytes) { v.push_back({n, "kernel", h * 4 + h * 2 + h * out_bytes, 4 * h}); };
  norm("input_norm", 2);
  gemv("q_proj", h, qd);
  gemv("k_proj", h, kd);
  gemv("v_proj", h, kd);
  // q, k, v (f32) in; q (bf16) out; new K and V rows (bf16) into the cache.
  v.push_back({s.qk_norm ? "qk_norm_rope_kv_write" : "rope_kv_write", "kernel",
               (qd + 2 * kd) * 4 + (s.qk_norm ? 2 * double(s.head_dim) * 2 : 0) + (qd + 2 * kd) * 2,
               8 * (qd + kd)});
  // Split-K attention over 64-key chunks: partials (d + 2 floats per head and chunk) written, then combined.
  const double part = double(s.heads) * std::ceil(keys / 64.0) * double(s.head_dim + 2) * 4;
  v.push_back({"attention_partial", "kernel", qd * 2 + 2 * keys * kd * 2 + part, 4 * qd * keys});
  v.push_back({"attention_combine", "kernel", part + qd * 2, 3 * part / 4});
  gemv("o_proj", qd, h);
  if (s.sandwich_norm) norm("post_attn_norm", 4);
  v.push_back({"residual_attn", "kernel", 3 * h * 4, h});
  norm("pre_mlp_norm", 2);
  gemv("mlp_gate", h, I);
  if (s.gated_mlp) gemv("mlp_up", h, I);
  v.push_back({s.gated_mlp ? "gelu_tanh_mul" : "gelu_tanh", "kernel", (s.gated_mlp ? 2 : 1) * I * 4 + I * 2, 12 * I});
  gemv("mlp_down", I, h);
  if (s.sandwich_norm) norm("post_mlp_norm", 4);
  v.push_back({"residual_mlp", "kernel", 3 * h * 4, h});
  return v;
}

nlohmann::json decode_step_plan(const DecodeShape& s) {
  validate_decode_shape(s);
  struct Agg {
    std::string kind;
    int64_t count = 0;
    double bytes = 0, flops = 0;
  };
  std::map<std::string, Agg> per;
  std::vector<std::string> order;
  int64_t launches = 0, cublas = 0;
  double bytes = 0, flops = 0, weight_bytes = 0, kv_bytes = 0;
  auto add = [&](const DecodeLaunch& l) {
    if (!per.count(l.name)) order.push_back(l.name);
    auto& a = per[l.name];
    a.kind = l.kind, a.count++, a.bytes += l.bytes, a.flops += l.flops;
    ++launches, cublas += l.kind == "cublas";
    bytes += l.bytes, flops += l.flops;
  };
  for (int64_t L = 0; L < s.layers; ++L) {
    for (const auto& l : decode_layer_launches(s, L)) {
      add(l);
      if (l.kind == "cublas") weight_bytes += l.flops;  // 2 in out FLOPs = in out bf16 weight bytes
    }
    kv_bytes += 2.0 * double(s.keys(L)) * double(s.kv_heads * s.head_dim) * 2;
  }
  add({"final_norm", "kernel", double(s.hidden) * 8, 4.0 * double(s.hidden)});
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& n : order) {
    const auto& a = per[n];
    ops.push_back({{"name", n}, {"kind", a.kind}, {"count", a.count}, {"bytes", a.bytes}, {"flops", a.flops}});
  }
  int64_t global_layers = 0;
  for (int64_t L = 0; L < s.layers; ++L) global_layers += s.global(L);
  return {{"model", s.name}, {"hidden", s.hidden}, {"intermediate", s.intermediate}, {"layers", s.layers},
          {"heads", s.heads}, {"kv_heads", s.kv_heads}, {"head_dim", s.head_dim}, {"context", s.context},
          {"sliding_window", s.sliding_window}, {"global_layers", global_layers},
          {"launches_per_layer", decode_layer_launches(s, 0).size()}, {"launches", launches},
          {"cublas_calls", cublas}, {"kernels", launches - cublas}, {"bytes", bytes}, {"flops", flops},
          {"weight_bytes", weight_bytes}, {"kv_cache_bytes_read", kv_bytes}, {"ops", ops},
          {"note", "batch 1, one new token; random bf16 weights; embedding gather and LM head left out"}};
}

}  // namespace flashkit::analysis
