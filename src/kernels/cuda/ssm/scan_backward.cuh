// Shared by the CUDA backward's kernels (scan_backward.cu: the checkpoint pass, generation 0's reverse pass, the
// reductions; scan_backward_v2.cu: generation 1's reverse pass): the workspace they write and read.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ssm_args.hpp"

namespace flashkit::kernels {

struct BwdWork {
  float* ck;               // [batch, chunks, d_inner, d_state]: the state at the start of every chunk
  float *pB, *pC;          // [batch, channel_blocks, seqlen, d_state]: dB, dC summed over each block's channels
  float *pA, *pD, *pbias;  // [batch, d_inner, d_state], [batch, d_inner], [batch, d_inner]
  int64_t chunks, channel_blocks;
};

// Generation 1's reverse pass (d_state <= 16, chunks of 16 steps, 16 channels per block of 256 threads).
void launch_bwd_reverse_one_state(const ScanArgs& a, const ScanGradArgs& g, const BwdWork& w, cudaStream_t stream);

}  // namespace flashkit::kernels
