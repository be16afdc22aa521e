// GPU versions of the two fusion demos of `flashkit profile` (issue 3):
//   profile gelu --gpu    tanh-GELU as 8 separate elementwise CUDA kernels (each reading and writing HBM) vs one
//                         fused kernel: bytes moved (model), kernel count, time (CUDA events, median after warm-up),
//                         % of the measured copy bandwidth;
//   profile decode --gpu  a synthetic decode step shaped like a small decoder (default gemma-3-270m, batch 1; random
//                         bf16 weights, cuBLAS GEMVs and small CUDA kernels) run eagerly, launch by launch, vs
//                         captured once into a CUDA graph and replayed: time per step and the launch gap.
// The plans (kernel lists, byte and launch counts) are plain C++ and testable without a GPU; the runs live in
// gpu_demos.cu, and gpu_demos_stub.cpp answers "built without CUDA" in CPU-only builds. Each variant is an NVTX
// range in CUDA builds, so Nsight Systems shows it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flashkit::analysis {

struct ModelConfig;

// ---- GELU
// One separate elementwise kernel: how many tensors of n elements it reads and writes, and FLOPs per element.
struct GeluKernel {
  std::string name;
  int reads = 1, writes = 1;
  double flops_per_elem = 1;
};
// x^3, *c1, +x, *c0, tanh, +1, *x, *0.5 (the order profile gelu uses on the CPU): 10 tensor reads, 8 writes.
std::vector<GeluKernel> gelu_separate_kernels();
// HBM bytes per element: separate = 18 e (e = element size), fused = 2 e (read x, write y).
double gelu_bytes_per_elem(bool fused, double elem_bytes);

struct GpuDemoResult {
  bool available = false;
  std::string error;       // why not (no CUDA build, no device, a CUDA error)
  nlohmann::json result;   // see gpu_demos.cu
};
// n elements of dtype "bf16" or "f32"; `warmup` untimed runs, then `reps` timed ones (CUDA events).
GpuDemoResult gpu_gelu_demo(int64_t n, const std::string& dtype, int reps, int warmup);

// ---- decode step
struct DecodeShape {
  std::string name = "gemma-3-270m";
  int64_t hidden = 640, intermediate = 2048, layers = 18, heads = 4, kv_heads = 1, head_dim = 256;
  int64_t sliding_window = 512;        // 0: every layer global
  std::vector<bool> layer_is_global;   // empty: Gemma 3's 5 sliding : 1 global
  bool qk_norm = true, sandwich_norm = true, gated_mlp = true;
  int64_t context = 1024;              // keys a global layer attends to (the new token included)
  bool global(int64_t layer) const;
  int64_t keys(int64_t layer) const;   // min(context, window) on sliding layers
};
DecodeShape decode_shape_from_config(const ModelConfig& c, int64_t context);
// Throws flashkit::Error(invalid_argument) when a size is not positive, heads % kv_heads != 0, head_dim is not a
// multiple of 32 in [32, 1024] or the context is over 131072.
void validate_decode_shape(const DecodeShape& s);

// One launch of the step: "cublas" (a GEMV through cublasGemmEx) or "kernel" (a flashkit demo kernel).
struct DecodeLaunch {
  std::string name, kind;
  double bytes = 0, flops = 0;  // HBM bytes (bf16 weights and KV cache; f32 activations) and FLOPs
};
// One layer, in launch order: input norm, q/k/v GEMVs, qk-norm+RoPE+KV-cache write, split-K attention (partial
// over 64-key chunks, then combine), o GEMV, [post-attention norm], residual add, pre-MLP norm, gate/[up] GEMVs,
// gated GELU, down GEMV, [post-MLP norm], residual add. gemma-3-270m: 17 launches.
std::vector<DecodeLaunch> decode_layer_launches(const DecodeShape& s, int64_t layer);
// The whole step: every layer plus the final norm (launches, cuBLAS calls, kernels, bytes, FLOPs, per-op totals).
nlohmann::json decode_step_plan(const DecodeShape& s);

// gemv: "gemv" (cublasTSSgemvStridedBatched, batch 1: cuBLAS's bf16-in/f32-out GEMV) or "gemmex" (cublasGemmEx
// with N = 1, the GEMM path).
GpuDemoResult gpu_decode_demo(const DecodeShape& s, int reps, int warmup, const std::string& gemv = "gemv");

}  // namespace flashkit::analysis
