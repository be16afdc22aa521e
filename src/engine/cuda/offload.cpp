#include "engine/cuda/offload.hpp"

#include <algorithm>
#include <string>

#include "core/cuda_check.hpp"
#include "flashkit/error.hpp"

namespace flashkit::engine::cuda {

namespace {
void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cuda_fail(e, std::string("cuda weight offload: ") + what);
}
constexpr size_t kAlign = 256;
// Per-matrix alignment padding a layer may need beyond the plan's bytes (a layer has at most a few matrices).
constexpr size_t kPadding = 8 * kAlign;
}  // namespace

WeightOffload::WeightOffload(const Backend::OffloadLayout& l, int device)
    : layers_(l.layers), first_(l.first_offloaded), schedule_(l.layers, l.first_offloaded, l.slots) {
  if (l.slot_bytes <= 0)
    fail(Status::invalid_argument, "cuda weight offload: slot bytes must be positive, got " + std::to_string(l.slot_bytes));
  ck(cudaSetDevice(device), "cudaSetDevice");
  slot_bytes_ = (size_t(l.slot_bytes) + kPadding + kAlign - 1) / kAlign * kAlign;
  const int64_t n = layers_ - first_;
  try {
    ck(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate(copy)");
    slots_.resize(size_t(schedule_.slots()));
    for (Slot& s : slots_) {
      ck(cudaMalloc(&s.device, slot_bytes_), "cudaMalloc(slot)");
      ck(cudaEventCreateWithFlags(&s.free, cudaEventDisableTiming), "cudaEventCreate");
      ck(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming), "cudaEventCreate");
    }
    host_.assign(size_t(n), nullptr);
    used_.assign(size_t(n), 0);
    for (auto& h : host_) {
      const cudaError_t e = cudaHostAlloc(&h, slot_bytes_, cudaHostAllocDefault);
      if (e != cudaSuccess) {
        cudaGetLastError();
        fail(Status::out_of_memory, "cuda weight offload: cannot pin " + std::to_string(slot_bytes_) +
                                        " bytes of host memory for an offloaded layer (" + std::to_string(n) +
                                        " layers offloaded; " + cudaGetErrorString(e) + ")");
      }
      host_total_ += slot_bytes_;
    }
  } catch (...) {
    release();
    throw;
  }
}

WeightOffload::~WeightOffload() { release(); }

void WeightOffload::release() {
  if (copy_) cudaStreamSynchronize(copy_);
  for (Slot& s : slots_) {
    if (s.device) cudaFree(s.device);
    if (s.free) cudaEventDestroy(s.free);
    if (s.ready) cudaEventDestroy(s.ready);
    s = Slot{};
  }
  for (void*& h : host_)
    if (h) cudaFreeHost(h), h = nullptr;
  if (copy_) cudaStreamDestroy(copy_);
  copy_ = nullptr;
}

WeightOffload::Placement WeightOffload::place(int64_t layer, size_t bytes) {
  if (!offloaded(layer)) fail(Status::internal, "cuda weight offload: layer " + std::to_string(layer) + " is resident");
  const size_t i = size_t(layer - first_);
  const size_t off = (used_[i] + kAlign - 1) / kAlign * kAlign;
  if (off + bytes > slot_bytes_)
    fail(Status::internal, "cuda weight offload: layer " + std::to_string(layer) + "'s matrices exceed the slot of " +
                               std::to_string(slot_bytes_) + " bytes");
  used_[i] = off + bytes;
  return {static_cast<char*>(slots_[size_t(schedule_.slot_of(layer))].device) + off, static_cast<char*>(host_[i]) + off};
}

void WeightOffload::execute(cudaStream_t compute) {
  for (const OffloadSchedule::Action& a : actions_) {
    Slot& s = slots_[size_t(a.slot)];
    if (a.kind == OffloadSchedule::Action::wait) {
      ck(cudaStreamWaitEvent(compute, s.ready, 0), "cudaStreamWaitEvent(compute)");
      continue;
    }
    // Everything queued on the compute stream so far (the slot's previous layer included) runs before the copy.
    ck(cudaEventRecord(s.free, compute), "cudaEventRecord(free)");
    ck(cudaStreamWaitEvent(copy_, s.free, 0), "cudaStreamWaitEvent(copy)");
    const size_t i = size_t(a.layer - first_), bytes = used_[i];
    ck(cudaMemcpyAsync(s.device, host_[i], bytes, cudaMemcpyHostToDevice, copy_), "cudaMemcpyAsync");
    ck(cudaEventRecord(s.ready, copy_), "cudaEventRecord(ready)");
    copied_ += bytes;
  }
  actions_.clear();
}

void WeightOffload::pass_start(cudaStream_t compute) {
  actions_.clear();  // (left over only if an earlier execute() threw)
  schedule_.pass_start(actions_);
  execute(compute);
}

void WeightOffload::next_linear(int64_t layer, cudaStream_t compute) {
  actions_.clear();
  schedule_.next_linear(layer, actions_);
  execute(compute);
}

}  // namespace flashkit::engine::cuda
