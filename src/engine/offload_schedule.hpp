// The order of weight-offload copies around the compute stream (CUDA backend: engine/cuda/offload.hpp executes it;
// docs/serving.md "CPU offload"). A pure state machine over host-side bookkeeping, unit-tested in the CPU build
// (tests/engine/test_offload_plan.cpp), so that the rules a captured CUDA graph depends on are checked without a GPU.
//
// Offloaded layers [first, layers) stream through `slots` device slots (offloaded layer i -> slot i % slots). The
// backend reports, in launch order:
//   pass_start()    at a pass's embedding: the first `slots` offloaded layers start copying;
//   next_linear(l)  before a group of kernels when the next linear op to launch belongs to layer l (-1: no layer).
// It gets back actions to issue in order:
//   copy(layer, slot): after everything launched so far on the compute stream, copy the layer into the slot;
//   wait(slot):        the compute stream waits for the slot's last copy.
// Guarantees (tested): a linear of an offloaded layer only runs after a wait on its slot's copy of that layer, and no
// copy into a slot is issued while a linear of the slot's previous layer may still be launched; every copy a pass
// issues is waited on in the same pass (a captured pass joins its copy stream); from the second pass on every pass
// issues the same actions (a captured pass replays correctly). A slot that still holds its layer (fewer than 2 x
// slots offloaded layers) is not copied again.
#pragma once
#include <cstdint>
#include <vector>

namespace flashkit::engine {

class OffloadSchedule {
 public:
  struct Action {
    enum Kind { copy, wait } kind;
    int64_t layer;  // copy: the layer copied; wait: the layer waited for
    int slot;
  };
  OffloadSchedule(int64_t layers, int64_t first_offloaded, int slots);

  bool offloaded(int64_t layer) const { return layer >= first_ && layer < layers_; }
  int slot_of(int64_t layer) const { return int((layer - first_) % int64_t(slots_.size())); }
  int slots() const { return int(slots_.size()); }

  void pass_start(std::vector<Action>& out);
  void next_linear(int64_t layer, std::vector<Action>& out);
  // After a failed graph capture: its copies never ran, so no slot is known to hold its layer.
  void forget();

 private:
  void load(int64_t layer, std::vector<Action>& out);
  void wait(int64_t layer, std::vector<Action>& out);
  struct Slot {
    int64_t holds = -1;  // the layer whose copy was issued into it last
    bool waited = true;  // the compute stream has waited for that copy
  };
  int64_t layers_ = 0, first_ = 0;
  std::vector<Slot> slots_;
  int64_t current_ = -1;  // the layer of the last next_linear
};

}  // namespace flashkit::engine
