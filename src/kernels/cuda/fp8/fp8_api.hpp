// Host launchers of the fp8 (e4m3) attention forward's CUDA kernels (src/kernels/cuda/fp8/), called by
// ops/attention_fp8_cuda.cpp after validation. Plain host header: no CUDA device code.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "flashkit/dtype.hpp"
#include "kernels/attention_args.hpp"

namespace flashkit::cuda {

// Keys per tile of the fp8 kernel: 128 (one 128-byte V^T panel); d128 also has the wide tile of 192 (two panels;
// docs/worklog/attention-fp8-cuda.md v5). V^T's keys are padded to a multiple of the call's tile.
constexpr int kFp8KeyTile = 128;
// Named barriers of the fp8 kernel (0 is __syncthreads): Q in shared memory, and the two warpgroups' turns.
constexpr int kWsBarQFp8 = 1, kWsBarTurnFp8 = 4;

struct Fp8FwdParams {
  kernels::AttentionFwdArgs a;  // q, k e4m3; a.scale already holds scale * q_descale * k_descale; o bf16
  float v_descale = 1.f;
};

struct Fp8LaunchResult {
  bool launched;
  const char* why_not;  // when not launched: a sentence for Status::unsupported
};

// The warp-specialized sm_90a kernel for head dim D with O-rescale mode RESCALE (0 every tile, 1 skipped by warps
// whose maxima all stayed, 2 lazy max) and key tile BN (instantiated: d128 with RESCALE 0, 1, 2 at BN 128 and with 1
// at BN 192, d256 with 0 and 1 at BN 128 -- fp8_rescale never picks the lazy mode there -- one file each);
// vt: the prep kernel's V^T for key tile BN. RESCALE and BN are fp8_rescale()'s and fp8_key_tile()'s choices
// (ops/attention_fp8_choice.hpp).
template <int D, int RESCALE, int BN>
Fp8LaunchResult launch_flash_fwd_fp8_sm90(const Fp8FwdParams& p, const uint8_t* vt, bool pingpong, cudaStream_t stream);

// V [batch, seqlen_k, kv_heads, head_dim] (e4m3, strided) -> vt [batch, kv_heads, head_dim, keys] with keys =
// fp8_vt_keys(seqlen_k, key_tile) (key_tile: the kernel's BN), permuted inside 32-key chunks (fp8_layout.hpp),
// padding zero.
void launch_fp8_vt_prep(const kernels::AttnOperand& v, const kernels::AttentionShape& sh, int key_tile, uint8_t* vt,
                        cudaStream_t stream);

// quantize_e4m3 on the device: amax of n elements of src into *amax_dev (f32 bits, must start at 0), then
// dst = e4m3(src / descale).
void launch_fp8_amax(const void* src, DType dt, int64_t n, float* amax_dev, cudaStream_t stream);
void launch_fp8_quantize(const void* src, DType dt, int64_t n, float descale, uint8_t* dst, cudaStream_t stream);

}  // namespace flashkit::cuda
