#include "engine/offload_schedule.hpp"

#include <algorithm>
#include <string>

#include "flashkit/error.hpp"

namespace flashkit::engine {

OffloadSchedule::OffloadSchedule(int64_t layers, int64_t first_offloaded, int slots)
    : layers_(layers), first_(first_offloaded) {
  if (layers <= 0 || first_offloaded < 0 || first_offloaded >= layers || slots < 1)
    fail(Status::invalid_argument, "offload schedule: bad layout (layers " + std::to_string(layers) +
                                       ", first offloaded " + std::to_string(first_offloaded) + ", slots " +
                                       std::to_string(slots) + ")");
  slots_.resize(size_t(std::min<int64_t>(slots, layers - first_offloaded)));
}

void OffloadSchedule::load(int64_t layer, std::vector<Action>& out) {
  Slot& s = slots_[size_t(slot_of(layer))];
  if (s.holds == layer) return;
  out.push_back({Action::copy, layer, slot_of(layer)});
  s.holds = layer;
  s.waited = false;
}

void OffloadSchedule::wait(int64_t layer, std::vector<Action>& out) {
  Slot& s = slots_[size_t(slot_of(layer))];
  if (s.holds != layer) load(layer, out);
  if (s.waited) return;
  out.push_back({Action::wait, layer, slot_of(layer)});
  s.waited = true;
}

void OffloadSchedule::pass_start(std::vector<Action>& out) {
  current_ = -1;
  const int64_t k = int64_t(slots_.size());
  for (int64_t l = first_; l < layers_ && l < first_ + k; ++l) load(l, out);
}

void OffloadSchedule::next_linear(int64_t layer, std::vector<Action>& out) {
  if (layer == current_) return;
  // Every linear of the previous layer precedes the first of this one, so its slot may take the layer `slots`
  // offloaded positions later (within this pass: a pass never leaves a copy behind for the next).
  const int64_t k = int64_t(slots_.size());
  if (offloaded(current_) && current_ + k < layers_) load(current_ + k, out);
  current_ = layer;
  if (offloaded(layer)) wait(layer, out);
}

void OffloadSchedule::forget() {
  for (Slot& s : slots_) s = Slot{};
  current_ = -1;
}

}  // namespace flashkit::engine
