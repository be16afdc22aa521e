#include "engine/random_weights.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "core/checked.hpp"
#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"

namespace flashkit::engine {

namespace {

class RandomStore final : public model::WeightStore {
 public:
  const model::WeightView* find(std::string_view name) const override {
    auto it = views_.find(std::string(name));
    return it == views_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> n;
    for (auto& kv : views_) n.push_back(kv.first);
    return n;
  }
  std::string source() const override { return "random weights"; }

  void add(const std::string& name, std::vector<int64_t> shape, model::WeightType type, float center, float amp,
           uint64_t seed) {
    int64_t n = 1;
    for (auto s : shape) n = checked_mul<int64_t>(n, s, "random weights: tensor " + name);
    const int64_t es = type == model::WeightType::f32 ? 4 : 2;
    const int64_t nbytes = checked_mul<int64_t>(n, es, "random weights: tensor " + name);
    auto buf = std::make_unique<uint64_t[]>(size_t(nbytes + 7) / 8);
    void* data = buf.get();
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < (n + 4095) / 4096; ++b) {
      uint64_t s = seed * 0x9E3779B97F4A7C15ull + uint64_t(b) * 0xD1B54A32D192ED03ull + 1;
      for (int64_t i = b * 4096; i < std::min(n, (b + 1) * 4096); ++i) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float u = float(s >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
        float v = center + amp * u;
        if (type == model::WeightType::f32) static_cast<float*>(data)[i] = v;
        else if (type == model::WeightType::bf16) static_cast<uint16_t*>(data)[i] = f32_to_bf16(v);
        else static_cast<uint16_t*>(data)[i] = f32_to_f16(v);
      }
    }
    model::WeightView w;
    w.name = name;
    w.type = type;
    w.shape = std::move(shape);
    w.data = data;
    w.nbytes = size_t(nbytes);
    bufs_.push_back(std::move(buf));
    views_[name] = std::move(w);
  }

 private:
  std::map<std::string, model::WeightView> views_;
  std::vector<std::unique_ptr<uint64_t[]>> bufs_;
};

}  // namespace

static std::unique_ptr<model::WeightStore> fill_random_weights(const ModelConfig& c, model::WeightType type,
                                                               uint64_t seed) {
  auto st = std::make_unique<RandomStore>();
  const int64_t H = c.hidden_size, F = c.intermediate_size, hd = c.head_dim;
  const int64_t qd = c.num_heads * hd, kvd = c.num_kv_heads * hd;
  const float a = 0.035f;  // uniform [-a, a): std 0.02
  const float nc = c.norm_plus_one ? 0.0f : 1.0f;
  uint64_t k = seed * 1000;
  st->add("model.embed_tokens.weight", {c.vocab_size, H}, type, 0, a, ++k);
  if (!c.tie_embeddings) st->add("lm_head.weight", {c.vocab_size, H}, type, 0, a, ++k);
  st->add("model.norm.weight", {H}, type, nc, 0.1f, ++k);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    st->add(p + "input_layernorm.weight", {H}, type, nc, 0.1f, ++k);
    st->add(p + "post_attention_layernorm.weight", {H}, type, nc, 0.1f, ++k);
    if (c.sandwich_norms) {
      st->add(p + "pre_feedforward_layernorm.weight", {H}, type, nc, 0.1f, ++k);
      st->add(p + "post_feedforward_layernorm.weight", {H}, type, nc, 0.1f, ++k);
    }
    if (c.qk_norm) {
      st->add(p + "self_attn.q_norm.weight", {hd}, type, nc, 0.1f, ++k);
      st->add(p + "self_attn.k_norm.weight", {hd}, type, nc, 0.1f, ++k);
    }
    st->add(p + "self_attn.q_proj.weight", {qd, H}, type, 0, a, ++k);
    st->add(p + "self_attn.k_proj.weight", {kvd, H}, type, 0, a, ++k);
    st->add(p + "self_attn.v_proj.weight", {kvd, H}, type, 0, a, ++k);
    if (c.attention_bias) {
      st->add(p + "self_attn.q_proj.bias", {qd}, type, 0, a, ++k);
      st->add(p + "self_attn.k_proj.bias", {kvd}, type, 0, a, ++k);
      st->add(p + "self_attn.v_proj.bias", {kvd}, type, 0, a, ++k);
    }
    st->add(p + "self_attn.o_proj.weight", {H, qd}, type, 0, a, ++k);
    if (c.o_bias) st->add(p + "self_attn.o_proj.bias", {H}, type, 0, a, ++k);
    st->add(p + "mlp.gate_proj.weight", {F, H}, type, 0, a, ++k);
    st->add(p + "mlp.up_proj.weight", {F, H}, type, 0, a, ++k);
    st->add(p + "mlp.down_proj.weight", {H, F}, type, 0, a, ++k);
  }
  return st;
}

std::unique_ptr<model::WeightStore> make_random_weights(const ModelConfig& c, model::WeightType type, uint64_t seed) {
  // The config validator bounded every dimension; the total is checked against the memory there is before the
  // first buffer is allocated.
  check_fits_host_memory(c, type == model::WeightType::f32 ? 4 : 2, "random weights");
  try {
    return fill_random_weights(c, type, seed);
  } catch (const std::bad_alloc&) {
    fail(Status::out_of_memory, "random weights: out of host memory while allocating " +
                                    std::to_string(weight_count(c)) + " parameters");
  }
}

}  // namespace flashkit::engine
