// The P^T/dS^T buffers of the warp-specialized d256 backward (flash_bwd_sm90_ws_d256.cuh, v24): a pure function,
// compiled for the device and for the host (tests/attention/test_cuda_choice.cpp checks it).
// Protocol: the consumer warpgroups meet at one named barrier per step. Step s writes its P^T/dS^T columns between
// barriers s-1 and s, and both warpgroups' wgmmas read the whole tile between barriers s and s+1 (each waits for
// them before it reaches barrier s+1). So the buffer step s+1 writes must differ from the one step s reads in the
// same interval -- a ring of two buffers by step parity.
#pragma once

#include "kernels/cuda/bwd_ws_staging.hpp"  // FK_BWDWS_HD

namespace flashkit::cuda {

constexpr int kBwdWsPdsBuffers = 2;
// The P^T/dS^T buffer of step `step`.
FK_BWDWS_HD constexpr int bwd_ws_pds_buffer(int step) { return step & 1; }

}  // namespace flashkit::cuda
