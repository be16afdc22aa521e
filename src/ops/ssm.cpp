// Validation and dispatch of the SSM ops (include/flashkit/ssm.hpp). Every message names the argument at fault and
// what was expected; the kernels below trust what passes.
#include <string>

#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/ssm.hpp"
#include "kernels/ssm_args.hpp"
#include "kernels/ssm_choice.hpp"
#ifdef FLASHKIT_WITH_CUDA
#include "kernels/cuda/ssm/ssm_cuda.hpp"
#endif

namespace flashkit {
namespace {

[[noreturn]] void bad(const std::string& msg) { fail(Status::invalid_argument, msg); }

constexpr int64_t kMaxState = 256;   // the CPU kernel's carry array
constexpr int64_t kMaxWidth = 16;    // the conv kernels' history array

std::string want_str(std::initializer_list<int64_t> want) {
  std::string s = "[";
  bool first = true;
  for (int64_t w : want) {
    s += (first ? "" : ", ") + std::to_string(w);
    first = false;
  }
  return s + "]";
}

// A present tensor: f32, on `dev`, the expected shape, last dimension contiguous, positive strides.
void check(const TensorView& t, const char* name, std::initializer_list<int64_t> want, const char* layout, Device dev,
           bool contiguous = false) {
  if (t.data == nullptr) bad(std::string(name) + ": data pointer is null");
  if (t.dtype != DType::f32)
    bad(std::string(name) + ": expected dtype f32, got " + std::string(dtype_name(t.dtype)));
  if (t.device != dev)
    bad(std::string(name) + ": expected a tensor on the same device as u, got one on " +
        (t.device == Device::cpu ? "cpu" : "cuda"));
  if (t.ndim != int32_t(want.size()))
    bad(std::string(name) + ": expected " + std::to_string(want.size()) + " dimensions " + layout + ", got " +
        std::to_string(t.ndim) + " (shape " + t.shape_str() + ")");
  int d = 0;
  for (int64_t w : want)
    if (t.shape[d++] != w)
      bad(std::string(name) + ": expected shape " + want_str(want) + " " + layout + ", got " + t.shape_str());
  if (t.numel() == 0) return;
  if (contiguous && !t.is_contiguous()) bad(std::string(name) + ": expected a contiguous tensor");
  if (t.strides[t.ndim - 1] != 1 && t.shape[t.ndim - 1] > 1)
    bad(std::string(name) + ": the last dimension must be contiguous (stride 1), got stride " +
        std::to_string(t.strides[t.ndim - 1]));
  for (d = 0; d < t.ndim; ++d)
    if (t.strides[d] < 0 || (t.strides[d] == 0 && t.shape[d] > 1))
      bad(std::string(name) + ": stride of dimension " + std::to_string(d) + " must be positive, got " +
          std::to_string(t.strides[d]));
}

bool present(const TensorView& t) { return t.data != nullptr; }

int threads_for(int requested) { return requested != 0 ? check_threads(requested, "threads", false) : num_threads(); }

// The kernel arguments of a forward call; `step`: the tensors are [batch, channels] rows (seqlen 1).
kernels::ScanArgs scan_args(const SelectiveScanArgs& a, bool step) {
  const TensorView& u = a.u;
  if (u.data == nullptr) bad("u: data pointer is null");
  const int nd = step ? 2 : 3;
  if (u.ndim != nd)
    bad(std::string("u: expected ") + std::to_string(nd) + " dimensions " +
        (step ? "[batch, d_inner]" : "[batch, seqlen, d_inner]") + ", got shape " + u.shape_str());
  if (a.A.data == nullptr) bad("A: data pointer is null");
  if (a.A.ndim != 2) bad("A: expected 2 dimensions [d_inner, d_state], got shape " + a.A.shape_str());
  const int64_t batch = u.shape[0], L = step ? 1 : u.shape[1], Di = u.shape[nd - 1], N = a.A.shape[1];
  const Device dev = u.device;
  if (N < 1 || N > kMaxState) bad("A: d_state (dimension 1) must be in 1.." + std::to_string(kMaxState) + ", got " +
                                  std::to_string(N));
  const char* lay = step ? "[batch, d_inner]" : "[batch, seqlen, d_inner]";
  const char* lay_n = step ? "[batch, d_state]" : "[batch, seqlen, d_state]";
  auto rows = [&](const TensorView& t, const char* name, int64_t cols, const char* layout) {
    if (step) check(t, name, {batch, cols}, layout, dev);
    else check(t, name, {batch, L, cols}, layout, dev);
  };
  rows(u, "u", Di, lay);
  rows(a.delta, "delta", Di, lay);
  check(a.A, "A", {Di, N}, "[d_inner, d_state] (d_inner from u)", dev, true);
  rows(a.B, "B", N, lay_n);
  rows(a.C, "C", N, lay_n);
  rows(a.y, "y", Di, lay);
  if (present(a.z)) rows(a.z, "z", Di, lay);
  if (present(a.D)) check(a.D, "D", {Di}, "[d_inner]", dev, true);
  if (present(a.delta_bias)) check(a.delta_bias, "delta_bias", {Di}, "[d_inner]", dev, true);
  if (present(a.state)) check(a.state, "state", {batch, Di, N}, "[batch, d_inner, d_state]", dev, true);
  else if (step) bad("state: required by selective_scan_step ([batch, d_inner, d_state] f32)");
  kernels::ScanArgs k;
  k.batch = batch; k.seqlen = L; k.d_inner = Di; k.d_state = N;
  k.u = static_cast<const float*>(u.data);
  k.delta = static_cast<const float*>(a.delta.data);
  k.A = static_cast<const float*>(a.A.data);
  k.B = static_cast<const float*>(a.B.data);
  k.C = static_cast<const float*>(a.C.data);
  k.D = static_cast<const float*>(a.D.data);
  k.z = static_cast<const float*>(a.z.data);
  k.delta_bias = static_cast<const float*>(a.delta_bias.data);
  k.state = static_cast<float*>(a.state.data);
  k.y = static_cast<float*>(a.y.data);
  // Strides of batch and time; a step's single time row has no time stride (0 is never used).
  auto bt = [&](const TensorView& t, int64_t* sb, int64_t* st) {
    if (!present(t)) return;
    *sb = t.strides[0];
    *st = step ? 0 : t.strides[1];
  };
  bt(u, &k.u_b, &k.u_t); bt(a.delta, &k.dl_b, &k.dl_t); bt(a.B, &k.B_b, &k.B_t); bt(a.C, &k.C_b, &k.C_t);
  bt(a.z, &k.z_b, &k.z_t); bt(a.y, &k.y_b, &k.y_t);
  k.softplus = a.delta_softplus;
  return k;
}

void run_scan(const SelectiveScanArgs& a, bool step, OpCost* cost) {
  kernels::ScanArgs k = scan_args(a, step);
  const Device dev = a.u.device;
  SsmImpl impl = a.impl;
  if (impl == SsmImpl::automatic) impl = dev == Device::cuda ? SsmImpl::cuda : SsmImpl::cpu;
  if ((impl == SsmImpl::cuda) != (dev == Device::cuda))
    fail(Status::unsupported, std::string("impl: the ") + (impl == SsmImpl::cuda ? "cuda" : "cpu/reference") +
                                  " selective scan runs on " + (impl == SsmImpl::cuda ? "CUDA" : "CPU") + " tensors only");
  k.threads = threads_for(a.threads);
  std::string kernel;
  if (impl == SsmImpl::reference) {
    kernels::selective_scan_reference(k);
    kernel = "reference.f64";
  } else if (impl == SsmImpl::cpu) {
    kernels::selective_scan_cpu(k, default_tuning().cpu_isa);
    kernel = "cpu.scan.f32";
  } else {
#ifdef FLASHKIT_WITH_CUDA
    if (k.d_state > kernels::kCudaMaxState)
      bad("A: the CUDA scan keeps the state in registers: d_state must be <= " +
          std::to_string(kernels::kCudaMaxState) + ", got " + std::to_string(k.d_state));
    kernel = step ? kernels::selective_scan_step_cuda(k) : kernels::selective_scan_cuda(k);
#else
    fail(Status::unsupported, "u: tensors are on a CUDA device but this flashkit build has no CUDA support");
#endif
  }
  if (cost) {
    const double rows = double(k.batch) * double(k.seqlen);
    // Bytes the op must move: u, delta, z in and y out per (row, channel); B and C once per row; the state in and out.
    const double per_row = double(k.d_inner) * (2 + (k.z ? 1 : 0)) + 2.0 * double(k.d_state);
    cost->bytes_read = 4.0 * (rows * per_row + (k.state ? double(k.batch) * k.d_inner * k.d_state : 0.0) +
                              double(k.d_inner) * k.d_state);
    cost->bytes_written = 4.0 * (rows * k.d_inner + (k.state ? double(k.batch) * k.d_inner * k.d_state : 0.0));
    cost->flops = rows * double(k.d_inner) * double(k.d_state) * 6.0;
    cost->model = "compulsory: u, delta, z, B, C, A read once, y written once, state in/out once";
    cost->kernel = kernel;
  }
}

kernels::ConvArgs conv_args(const CausalConv1dArgs& a, bool step) {
  const TensorView& x = a.x;
  if (x.data == nullptr) bad("x: data pointer is null");
  const int nd = step ? 2 : 3;
  if (x.ndim != nd)
    bad(std::string("x: expected ") + std::to_string(nd) + " dimensions " +
        (step ? "[batch, channels]" : "[batch, seqlen, channels]") + ", got shape " + x.shape_str());
  if (a.weight.data == nullptr) bad("weight: data pointer is null");
  if (a.weight.ndim != 2) bad("weight: expected 2 dimensions [channels, width], got shape " + a.weight.shape_str());
  const int64_t batch = x.shape[0], L = step ? 1 : x.shape[1], Ch = x.shape[nd - 1], W = a.weight.shape[1];
  const Device dev = x.device;
  if (W < 1 || W > kMaxWidth)
    bad("weight: width (dimension 1) must be in 1.." + std::to_string(kMaxWidth) + ", got " + std::to_string(W));
  const char* lay = step ? "[batch, channels]" : "[batch, seqlen, channels]";
  if (step) { check(x, "x", {batch, Ch}, lay, dev); check(a.out, "out", {batch, Ch}, lay, dev); }
  else { check(x, "x", {batch, L, Ch}, lay, dev); check(a.out, "out", {batch, L, Ch}, lay, dev); }
  check(a.weight, "weight", {Ch, W}, "[channels, width] (channels from x)", dev, true);
  if (present(a.bias)) check(a.bias, "bias", {Ch}, "[channels]", dev, true);
  if (present(a.conv_state)) check(a.conv_state, "conv_state", {batch, Ch, W}, "[batch, channels, width]", dev, true);
  else if (step) bad("conv_state: required by causal_conv1d_step ([batch, channels, width] f32)");
  kernels::ConvArgs k;
  k.batch = batch; k.seqlen = L; k.channels = Ch; k.width = W;
  k.x = static_cast<const float*>(x.data);
  k.weight = static_cast<const float*>(a.weight.data);
  k.bias = static_cast<const float*>(a.bias.data);
  k.state = static_cast<float*>(a.conv_state.data);
  k.out = static_cast<float*>(a.out.data);
  k.x_b = x.strides[0]; k.x_t = step ? 0 : x.strides[1];
  k.o_b = a.out.strides[0]; k.o_t = step ? 0 : a.out.strides[1];
  k.silu = a.silu;
  return k;
}

void run_conv(const CausalConv1dArgs& a, bool step) {
  kernels::ConvArgs k = conv_args(a, step);
  const Device dev = a.x.device;
  SsmImpl impl = a.impl;
  if (impl == SsmImpl::automatic) impl = dev == Device::cuda ? SsmImpl::cuda : SsmImpl::cpu;
  if ((impl == SsmImpl::cuda) != (dev == Device::cuda))
    fail(Status::unsupported, "impl: the chosen conv1d implementation does not run on this device's tensors");
  k.threads = threads_for(a.threads);
  if (impl == SsmImpl::reference) kernels::causal_conv1d_reference(k);
  else if (impl == SsmImpl::cpu) kernels::causal_conv1d_cpu(k, default_tuning().cpu_isa);
  else {
#ifdef FLASHKIT_WITH_CUDA
    kernels::causal_conv1d_cuda(k);
#else
    fail(Status::unsupported, "x: tensors are on a CUDA device but this flashkit build has no CUDA support");
#endif
  }
}

}  // namespace

void selective_scan_forward(const SelectiveScanArgs& a, OpCost* cost) { run_scan(a, false, cost); }
void selective_scan_step(const SelectiveScanArgs& a, OpCost* cost) { run_scan(a, true, cost); }
void causal_conv1d_forward(const CausalConv1dArgs& a) { run_conv(a, false); }
void causal_conv1d_step(const CausalConv1dArgs& a) { run_conv(a, true); }

void selective_scan_backward(const SelectiveScanArgs& a, const TensorView& dout, const SelectiveScanGrads& g) {
  kernels::ScanArgs k = scan_args(a, false);
  const Device dev = a.u.device;
  SsmImpl impl = a.impl;
  if (impl == SsmImpl::automatic) impl = dev == Device::cuda ? SsmImpl::cuda : SsmImpl::cpu;
  if ((impl == SsmImpl::cuda) != (dev == Device::cuda))
    fail(Status::unsupported, std::string("impl: the ") + (impl == SsmImpl::cuda ? "cuda" : "cpu/reference") +
                                  " selective scan backward runs on " + (impl == SsmImpl::cuda ? "CUDA" : "CPU") +
                                  " tensors only");
  if (present(a.state)) bad("state: selective_scan_backward takes no initial state (pass an empty state)");
  const int64_t batch = k.batch, L = k.seqlen, Di = k.d_inner, N = k.d_state;
  check(dout, "dout", {batch, L, Di}, "[batch, seqlen, d_inner] (like y)", dev);
  check(g.du, "du", {batch, L, Di}, "[batch, seqlen, d_inner]", dev, true);
  check(g.ddelta, "ddelta", {batch, L, Di}, "[batch, seqlen, d_inner]", dev, true);
  check(g.dA, "dA", {Di, N}, "[d_inner, d_state]", dev, true);
  check(g.dB, "dB", {batch, L, N}, "[batch, seqlen, d_state]", dev, true);
  check(g.dC, "dC", {batch, L, N}, "[batch, seqlen, d_state]", dev, true);
  auto opt = [&](const TensorView& grad, bool wanted, const char* name, std::initializer_list<int64_t> shape,
                 const char* layout) {
    if (wanted) check(grad, name, shape, layout, dev, true);
    else if (present(grad)) bad(std::string(name) + ": must be empty, the forward has no such input");
  };
  opt(g.dD, k.D != nullptr, "dD", {Di}, "[d_inner]");
  opt(g.dz, k.z != nullptr, "dz", {batch, L, Di}, "[batch, seqlen, d_inner]");
  opt(g.ddelta_bias, k.delta_bias != nullptr, "ddelta_bias", {Di}, "[d_inner]");
  kernels::ScanGradArgs kg;
  kg.dout = static_cast<const float*>(dout.data);
  kg.dout_b = dout.strides[0]; kg.dout_t = dout.strides[1];
  kg.du = static_cast<float*>(g.du.data); kg.ddelta = static_cast<float*>(g.ddelta.data);
  kg.dA = static_cast<float*>(g.dA.data); kg.dB = static_cast<float*>(g.dB.data); kg.dC = static_cast<float*>(g.dC.data);
  kg.dD = static_cast<float*>(g.dD.data); kg.dz = static_cast<float*>(g.dz.data);
  kg.ddelta_bias = static_cast<float*>(g.ddelta_bias.data);
  if (impl == SsmImpl::cuda) {
#ifndef FLASHKIT_WITH_CUDA
    fail(Status::unsupported, "u: tensors are on a CUDA device but this flashkit build has no CUDA support");
#else
    if (N > kernels::kCudaMaxState)
      bad("A: the CUDA scan backward keeps the state in registers: d_state must be <= " +
          std::to_string(kernels::kCudaMaxState) + ", got " + std::to_string(N));
    // Its workspace (chunk checkpoints, per-block dB/dC partials) is checked before anything is allocated.
    const double need = double(kernels::plan_scan_backward(batch, L, Di, N).workspace_bytes());
    const double limit = double(max_workspace_bytes());
    if (need > limit)
      fail(Status::out_of_memory, "selective_scan_backward: the CUDA backward needs " + std::to_string(need / 1e9) +
                                      " GB of workspace (one state per 16 steps and per-block dB/dC partials), more "
                                      "than the limit of " + std::to_string(limit / 1e9) +
                                      " GB (FLASHKIT_MAX_WORKSPACE_BYTES); split the batch");
    kernels::selective_scan_backward_cuda(k, kg);
    return;
#endif
  }
  // The f32 CPU kernel unless the reference is asked for (its memory: a [batch, seqlen, d_state] pair of partial dB,
  // dC sums per thread, bounded with the threads).
  k.threads = threads_for(a.threads);
  if (impl == SsmImpl::reference) kernels::selective_scan_backward_reference(k, kg);
  else kernels::selective_scan_backward_cpu(k, kg);
}

}  // namespace flashkit
