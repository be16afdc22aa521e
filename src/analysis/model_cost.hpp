// Model cost from a Hugging Face config.json: per-op MACs, FLOPs and bytes of one decoder layer, whole-model
// totals, KV-cache bytes per token, the roofline time floor on a device, and the memory footprint
// (inference fit, tensor-parallel degree, training memory under data parallelism and ZeRO 1/2/3).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware.hpp"

namespace flashkit::analysis {

struct ModelConfig {
  std::string name;          // file or directory name
  std::string model_type;    // "gemma3_text", "llama", ...
  std::string activation;    // "gelu_pytorch_tanh", "silu", ...
  int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  int64_t sliding_window = 0;          // 0: no sliding-window layers
  std::vector<bool> layer_is_global;   // per layer: full attention (true) or sliding window (false)
  bool tied_embeddings = true;
  bool qk_norm = false;                // per-head RMSNorm on q and k (Gemma 3, Qwen 3)
  bool sandwich_norm = false;          // post-attention and post-MLP norms as well (Gemma 2/3)
  bool gated_mlp = true;               // gate and up projections
  int64_t global_layers() const;
  int64_t sliding_layers() const { return layers - global_layers(); }
};

// Accepts a directory holding config.json or the file itself; Gemma 3's nested text_config is used when
// present. The engine's config validator (engine/config.hpp parse_config) decides what is accepted, so `cost`
// takes exactly the configs `generate` takes. Throws flashkit::Error(invalid_argument) naming the file and field.
ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& name);

struct ParamCount {
  double embedding = 0, per_layer = 0, final_norm = 0, lm_head = 0 /* 0 when tied */, total = 0;
};
ParamCount count_params(const ModelConfig& c);

struct Workload {
  bool decode = false;   // false: prefill
  int64_t batch = 1;     // sequences
  int64_t prefill = 512; // new tokens per sequence (prefill)
  int64_t context = 1024;  // keys each decode token attends to (including itself)
  double weight_bytes = 2, act_bytes = 2, kv_bytes = 2;  // element sizes (bf16 default)
  std::string compute_dtype = "bf16";
  int64_t tokens() const { return decode ? batch : batch * prefill; }
};

struct OpRow {
  std::string name;
  double macs = 0, flops = 0;
  double weight_bytes = 0, act_bytes = 0, kv_bytes = 0;
  bool matmul = false;  // runs on the tensor (matrix) roof; elementwise ops on the f32 vector roof
  double bytes() const { return weight_bytes + act_bytes + kv_bytes; }
  double intensity() const { return bytes() > 0 ? flops / bytes() : 0; }
  // Filled by evaluate():
  std::string bound;
  double floor_s = 0;
};

// One decoder layer (global or sliding-window attention).
std::vector<OpRow> layer_ops(const ModelConfig& c, const Workload& w, bool global_layer);
// Embedding lookup, final norm and LM head (logits only for the last token of each prefill sequence).
std::vector<OpRow> head_ops(const ModelConfig& c, const Workload& w);
// Fills bound and floor_s of each row on `dev` (matmuls on the compute dtype's roof, the rest on f32).
void evaluate(std::vector<OpRow>& rows, const DeviceSpec& dev, const std::string& compute_dtype);

struct KvCache {
  double per_token_global = 0;   // bytes per token, summed over global layers
  double per_token_sliding = 0;  // bytes per token, summed over sliding layers (only `window` tokens kept)
  double per_token = 0;          // both (contexts up to the window)
  double at_context(int64_t context) const;  // one sequence
  int64_t window = 0;
};
KvCache kv_cache(const ModelConfig& c, double kv_elem_bytes);

struct ModelTotals {
  double macs = 0, flops = 0, bytes = 0, weight_bytes = 0, act_bytes = 0, kv_bytes = 0;
  double floor_sum_of_ops = 0;   // sum over ops of each op's roofline floor
  double floor_whole = 0;        // max(total flops / peak, total bytes / bandwidth)
  double intensity = 0;
  std::string bound;             // of the whole step, on the compute dtype's roof
};
ModelTotals model_totals(const ModelConfig& c, const Workload& w, const DeviceSpec& dev);

struct MemoryPlan {
  double weights = 0, kv_cache = 0, activations = 0, total = 0;  // bytes, inference
  double usable = 0;            // 90% of device memory
  bool fits = false;
  int tp_degree = 1;            // smallest power of two tensor-parallel degree that fits (weights, KV sharded)
  int dp = 8;
  // Mixed-precision Adam, bytes per GPU (no activations): (2 + 2 + 12) Psi unsharded.
  double train_ddp = 0, train_zero1 = 0, train_zero2 = 0, train_zero3 = 0;
};
MemoryPlan memory_plan(const ModelConfig& c, const Workload& w, const DeviceSpec& dev, int dp);

// Data-parallel communication per optimizer step as flashkit trains (src/train/data_parallel.*): the f32 gradient
// arena all-reduced, then the f32 parameters all-gathered (ZeRO-1), each a ring over dp GPUs on the device's link:
// all-reduce time = 2 (dp-1)/dp x bytes / link (busbw = link), all-gather (dp-1)/dp x bytes / link. Latency
// excluded. Times are 0 when dp == 1 or the device has no link in the table (link_gbs 0).
struct DataParallelComm {
  int dp = 1;
  double grad_bytes = 0, param_bytes = 0, link_gbs = 0;
  double allreduce_s = 0, allgather_s = 0;
  double total_s() const { return allreduce_s + allgather_s; }
};
DataParallelComm dp_comm(const ModelConfig& c, const DeviceSpec& dev, int dp);

// The whole report as JSON (what `flashkit cost --json` prints).
nlohmann::json cost_report(const ModelConfig& c, const Workload& w, const DeviceSpec& dev, int dp,
                           const std::string& layer_kind /* "global" | "sliding" | "" (auto) */);
// Sweeps: decode batch 1..max_batch (powers of two) and prefill length 64..max_len, with the crossover
// (smallest batch or length whose whole-step intensity reaches the ridge point).
nlohmann::json cost_sweep(const ModelConfig& c, const Workload& base, const DeviceSpec& dev, const std::string& kind,
                          int64_t lo, int64_t hi);

}  // namespace flashkit::analysis
