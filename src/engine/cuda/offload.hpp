// CPU offload of decoder-layer weights on the CUDA backend (Backend::configure_offload; docs/serving.md "CPU
// offload"; the plan: engine/offload_plan.hpp; the order of the copies: engine/offload_schedule.hpp).
//
// Offloaded layers keep their matrices in pinned host memory (one buffer per layer, the matrices at 256-byte aligned
// offsets). Their Matrix handles point into one of K device slots (offloaded layer i -> slot i % K), so the kernels
// read them like any weight; this class carries out the schedule's actions on its own copy stream, with two events
// per slot:
//   copy(layer, slot): free[s] recorded on the compute stream (after everything launched so far, the slot's previous
//                      layer included), the copy stream waits on it, copies, records ready[s];
//   wait(slot):        the compute stream waits on ready[s].
// The backend calls pass_start() at a pass's embedding and next_linear(l) before each group of kernels (l: the layer
// of the next linear op to launch), eagerly or while capturing a CUDA graph: every copy a pass issues is waited on in
// the same pass, so a captured pass joins the copy stream back into the capture (memcpy nodes from pinned memory).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/backend.hpp"
#include "engine/offload_schedule.hpp"

namespace flashkit::engine::cuda {

class WeightOffload {
 public:
  WeightOffload(const Backend::OffloadLayout& layout, int device);
  ~WeightOffload();
  WeightOffload(const WeightOffload&) = delete;
  WeightOffload& operator=(const WeightOffload&) = delete;

  bool offloaded(int64_t layer) const { return schedule_.offloaded(layer); }
  struct Placement {
    void* device;  // where kernels read it (inside the layer's slot)
    void* host;    // pinned: the caller writes the matrix here
  };
  // Room for `bytes` of a matrix of an offloaded layer (load time); internal error beyond the slot's bytes.
  Placement place(int64_t layer, size_t bytes);

  void pass_start(cudaStream_t compute);
  void next_linear(int64_t layer, cudaStream_t compute);
  // After a failed graph capture: its copies never ran, so no slot is known to hold its layer.
  void forget() { schedule_.forget(); }

  uint64_t device_bytes() const { return uint64_t(slot_bytes_) * slots_.size(); }
  uint64_t host_bytes() const { return host_total_; }
  uint64_t bytes_copied() const { return copied_; }
  int64_t offloaded_layers() const { return layers_ - first_; }

 private:
  void release();                      // frees everything (destructor, failed constructor)
  void execute(cudaStream_t compute);  // the actions in actions_, in order

  struct Slot {
    void* device = nullptr;
    cudaEvent_t free = nullptr, ready = nullptr;
  };
  int64_t layers_ = 0, first_ = 0;
  OffloadSchedule schedule_;
  std::vector<OffloadSchedule::Action> actions_;
  size_t slot_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<void*> host_;   // per offloaded layer: pinned buffer of slot_bytes_
  std::vector<size_t> used_;  // per offloaded layer: bytes placed
  cudaStream_t copy_ = nullptr;
  uint64_t host_total_ = 0, copied_ = 0;
};

}  // namespace flashkit::engine::cuda
