// Workloads `flashkit profile` runs under the profiler: the tanh-GELU fusion example and attention
// (standard vs flash) through the public attention API with its OpCost.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profiler.hpp"

namespace flashkit::analysis {

// tanh-GELU y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) over n floats, `reps` times each:
// as 8 separate elementwise passes (the way an eager framework runs it, one kernel per op, each reading and
// writing main memory) and as one fused pass. Returns bytes moved, kernel count, time, and max |diff|.
nlohmann::json profile_gelu(Profiler& p, int64_t n, int reps);
// The separate and fused forms on caller memory (used by tests).
void gelu_separate(const float* x, float* y, float* tmp_a, float* tmp_b, int64_t n, Profiler* p = nullptr);
void gelu_fused(const float* x, float* y, int64_t n);
float gelu_fast_tanh(float x);  // the tanh both forms use (exposed for tests)

struct AttentionProfileArgs {
  int64_t batch = 1, heads = 8, kv_heads = 8, seqlen = 1024, head_dim = 64;
  bool causal = false, backward = false;
  std::vector<std::string> impls = {"standard", "flash"};
  int reps = 3;
};
nlohmann::json profile_attention(Profiler& p, const AttentionProfileArgs& a);

// One decoder layer of `c` run on this CPU in f32 (BLAS projections, flashkit flash attention, simple loops
// for norms/RoPE/activation/residuals), each op under the profiler with the FLOPs and bytes the cost model
// predicts (layer_ops with 4-byte elements); returns per-op predicted floor vs measured time.
struct LayerProfileArgs {
  bool decode = false;
  int64_t prefill = 512, batch = 1, context = 1024;
  bool global = true;
  int reps = 3;
};
struct ModelConfig;
nlohmann::json profile_layer(Profiler& p, const ModelConfig& c, const LayerProfileArgs& a);

}  // namespace flashkit::analysis
