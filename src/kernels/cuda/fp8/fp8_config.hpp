// The fp8 forward kernel's configuration (pipeline stages, ping-pong, the v2 overlapped schedule) as a pure function
// of the head dim and the tuning knobs: the launcher instantiates exactly the configurations this can return, and
// the CPU build tests it (tests/attention/test_attention_fp8.cpp). Plain C++: no CUDA header. Why each default:
// docs/worklog/attention-fp8-cuda.md (v2).
#pragma once
#include <cstdint>

namespace flashkit::cuda {

struct Fp8KernelConfig {
  int stages;     // K and V^T ring stages (128 keys each)
  bool pingpong;  // the consumer warpgroups take turns issuing their wgmmas
  bool overlap;   // v2: the softmax of S_j runs while S_{j+1} = Q K_{j+1}^T and P_{j-1} V_{j-1} are on the tensor cores
};

// Stage counts instantiated per head dim (shared memory: d128 16 KB Q + 32 KB per stage; d256 32 KB + 64 KB).
constexpr bool fp8_stages_supported(int64_t head_dim, int stages) {
  return head_dim == 128 ? (stages == 3 || stages == 4) : head_dim == 256 ? (stages == 2 || stages == 3) : false;
}

// overlap_knob: Tuning::fp8_overlap; stages_knob: Tuning::fp8_stages (0 auto; a count the head dim lacks: auto).
// d256 keeps the v1 schedule: a second S accumulator (64 registers) does not fit beside its 128-register O in the
// consumers' 240. The overlapped schedule holds each K stage one slot longer (released after the next slot's issue),
// so its default ring is one stage deeper.
constexpr Fp8KernelConfig fp8_kernel_config(int64_t head_dim, bool pingpong, bool overlap_knob, int stages_knob) {
  const bool overlap = head_dim == 128 && overlap_knob;
  const int auto_stages = head_dim == 128 ? (overlap ? 4 : 3) : 2;
  const int stages = fp8_stages_supported(head_dim, stages_knob) ? stages_knob : auto_stages;
  return Fp8KernelConfig{stages, pingpong, overlap};
}

}  // namespace flashkit::cuda
