// CUDA SSM kernels (src/kernels/cuda/ssm/scan.cu): launched by src/ops/ssm.cpp on validated arguments, and by the
// engine's CUDA backend (its Mamba ops) on its own stream. `stream` null: the calling thread's stream
// (flashkit::cuda_stream()). The scans return the name of the kernel configuration they ran.
#pragma once
#include <string>

#include "kernels/ssm_args.hpp"
#include "kernels/ssm_choice.hpp"  // kCudaMaxState

namespace flashkit::kernels {

// generation: see choose_scan_kernel (src/kernels/ssm_choice.hpp; flashkit::Error for one it does not know); 0 in
// production.
std::string selective_scan_cuda(const ScanArgs& a, void* stream = nullptr, int generation = 0);
std::string selective_scan_step_cuda(const ScanArgs& a, void* stream = nullptr);
// v3 of the scan forward (scan_v3.cu; run_scan in scan.cu launches it for ScanKernel::v3_*): chunks of 16 or 32
// steps with one state per thread, or chunks of 16 with two.
void launch_scan_v3(const ScanArgs& a, void* stream, int chunk, int states_per_thread);
// v4 (scan_v4.cu; ScanKernel::v4_*): chunks of 16 steps through a 4-stage cp.async ring, 2 or 4 states per thread;
// fma_exp_states (0 or, with 4 states, 1) of them take their exp on the FMA pipe instead of the SFU. lean: generation
// 11 (4 states per thread, less per-chunk overhead; states_per_thread and fma_exp_states are then ignored).
void launch_scan_v4(const ScanArgs& a, void* stream, int states_per_thread, int fma_exp_states = 0, bool lean = false);
// Generation 13 (scan_v4_pipe.cu; ScanKernel::v4_npt4_lean_pipe): generation 11 with the recurrence of chunk k, the
// prologue of chunk k + 1 and the epilogue of chunk k - 1 between the same barriers (5-stage ring, 68 KB).
void launch_scan_v4_pipe(const ScanArgs& a, void* stream);
// The backward (scan_backward.cu): allocates its workspace (plan_scan_backward, kernels/ssm_choice.hpp) on the stream.
// generation: see plan_scan_backward (kernels/ssm_choice.hpp); 0 in production.
std::string selective_scan_backward_cuda(const ScanArgs& a, const ScanGradArgs& g, void* stream = nullptr,
                                         int generation = 0);
void causal_conv1d_cuda(const ConvArgs& a, void* stream = nullptr);

}  // namespace flashkit::kernels
