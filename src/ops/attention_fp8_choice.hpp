// Whether the CUDA fp8 attention forward can run a call, and which of its kernels, as pure functions of the device,
// the head dim and the Tuning (unit-tested in the CPU build: tests/attention/test_attention_fp8.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "core/cuda_device.hpp"
#include "flashkit/tuning.hpp"

namespace flashkit {

// Head dims the sm_90a fp8 kernel is instantiated for.
inline constexpr int64_t kFp8CudaHeadDims[] = {128, 256};

// Empty when the fp8 kernel runs the call; otherwise the reason (a whole sentence for Status::unsupported).
std::string fp8_cuda_unsupported_reason(const DeviceInfo& dev, int64_t head_dim);

// The kernel's O-rescale mode (RESCALE, worklog v4; instantiated at d128 and d256): 0 O rescaled after every key
// tile; 1 skipped by a warp whose 16 rows all kept their max (bit-identical to 0); 2 the lazy max (a row's max moves
// only past kernels::kFp8LazyRescaleTau; P rounded against another max: the tile_max_lazy reference).
// Tuning::fp8_rescale (0, 1, 2) forces one; otherwise (auto, or a value not instantiated) the per-head-dim default,
// 0 until the GPU run measures 1 and 2.
// Automatic: the exact skip (mode 1) at both head dims since run s16-3 (H200, 16k tokens: d128 733 -> 804 TFLOP/s
// non-causal, d256 978 -> 1,025; same bytes as mode 0).
inline constexpr int kFp8RescaleAutoD128 = 1, kFp8RescaleAutoD256 = 1;
int fp8_rescale(int64_t head_dim, const Tuning& tuning);

// The kernel's key tile (BN, worklog v5): 128 keys (one V^T panel); at d128 with the exact skip (rescale 1) also the
// wide tile of 192 (two V^T panels; the per-tile softmax chains spread over 1.5x the tensor work). Tuning::fp8_key_tile
// (128, 192) forces one where it is instantiated, otherwise (0, auto; or a tile without a kernel) the automatic
// choice: 192 from kFp8WideKeyTileMinKeys keys, causal or not. Run s21-2 (H200, 32k tokens a call, 7 alternations):
// 192 against 128 +3-5% at 8k, +4-5% at 16k-32k, level at 4k, -4 to -13% at 1k-2k (fewer tiles a CTA to hide
// its prologue); 224 never beat 192 (removed).
inline constexpr int kFp8WideKeyTile = 192;
inline constexpr int64_t kFp8WideKeyTileMinKeys = 8192;
int fp8_key_tile(int64_t head_dim, int rescale, int64_t seqlen_k, const Tuning& tuning);

// OpCost's kernel name for the choice, e.g. "cuda.flash.fwd.sm90ws.e4m3.d128.r1" (key tile 128) or
// "cuda.flash.fwd.sm90ws.e4m3.d128.r1.bn192".
std::string fp8_kernel_name(int64_t head_dim, int rescale, int key_tile = 128);

}  // namespace flashkit
