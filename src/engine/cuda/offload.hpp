// CPU offload of decoder-layer weights on the CUDA backend (Backend::configure_offload; docs/serving.md "CPU
// offload"; the plan: engine/offload_plan.hpp).
//
// Offloaded layers keep their matrices in pinned host memory (one buffer per layer, the matrices at 256-byte aligned
// offsets). Their Matrix handles point into one of K device slots (layer i of the offloaded ones -> slot i % K), so
// the kernels read them like any weight; this class only orders the copies around the compute stream, on its own
// copy stream, with two events per slot:
//   free[s]  recorded on the compute stream after the last kernel that reads the slot's previous layer;
//   ready[s] recorded on the copy stream after the slot's copy; the compute stream waits on it before the layer.
// The backend calls, in queue order, as it launches (eagerly or while capturing a CUDA graph):
//   pass_start()   at a pass's embedding: copies the first K offloaded layers (the resident layers compute meanwhile);
//   next_linear(l) before a group of kernels when the next linear op to launch belongs to layer l: if that is a new
//                  layer, the previous layer p is done (every linear of p precedes the first of l), so p's slot starts
//                  loading the layer K offloaded positions after p; then the compute stream waits for l's slot.
// Every copy a pass issues is waited on later in the same pass, so a captured pass joins the copy stream back into
// the capture (memcpy nodes from pinned memory) and replays as one graph. A slot that still holds its layer (fewer
// than 2K offloaded layers) is not copied again.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/backend.hpp"

namespace flashkit::engine::cuda {

class WeightOffload {
 public:
  WeightOffload(const Backend::OffloadLayout& layout, int device);
  ~WeightOffload();
  WeightOffload(const WeightOffload&) = delete;
  WeightOffload& operator=(const WeightOffload&) = delete;

  bool offloaded(int64_t layer) const { return layer >= first_ && layer < layers_; }
  struct Placement {
    void* device;  // where kernels read it (inside the layer's slot)
    void* host;    // pinned: the caller writes the matrix here
  };
  // Room for `bytes` of a matrix of an offloaded layer (load time); internal error beyond the slot's bytes.
  Placement place(int64_t layer, size_t bytes);

  void pass_start(cudaStream_t compute);
  void next_linear(int64_t layer, cudaStream_t compute);

  // After a failed graph capture: the copies it recorded never ran, so no slot is known to hold its layer.
  void forget() {
    for (Slot& s : slots_) s.holds = -1, s.waited = true;
    current_ = -1;
  }

  uint64_t device_bytes() const { return uint64_t(slot_bytes_) * slots_.size(); }
  uint64_t host_bytes() const { return host_total_; }
  uint64_t bytes_copied() const { return copied_; }
  int64_t offloaded_layers() const { return layers_ - first_; }

 private:
  void release();  // frees everything (destructor, failed constructor)
  int slot_of(int64_t layer) const { return int((layer - first_) % int64_t(slots_.size())); }
  void load(int64_t layer, cudaStream_t compute);   // issue the copy of `layer` into its slot (unless it is there)
  void wait(int64_t layer, cudaStream_t compute);   // compute waits for `layer`'s copy

  struct Slot {
    void* device = nullptr;
    cudaEvent_t free = nullptr, ready = nullptr;
    int64_t holds = -1;   // the layer whose copy was issued into it last
    bool waited = true;   // the compute stream has waited for that copy
  };
  int64_t layers_ = 0, first_ = 0;
  size_t slot_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<void*> host_;       // per offloaded layer: pinned buffer of slot_bytes_
  std::vector<size_t> used_;      // per offloaded layer: bytes placed
  cudaStream_t copy_ = nullptr;
  int64_t current_ = -1;          // the layer of the last next_linear
  uint64_t host_total_ = 0, copied_ = 0;
};

}  // namespace flashkit::engine::cuda
