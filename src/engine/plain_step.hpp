// One plain decode step and its token, as generate() takes it: the fast greedy path (the session reduces the logits
// row on the device and downloads only the argmax) when the choice is the argmax of the raw logits, else decode and
// the sampler. Shared by generate() and speculative decoding's steps without proposals, so both pick the same token
// the same way.
#pragma once
#include <cstdint>
#include <span>

#include "engine/backend.hpp"
#include "engine/sampler.hpp"
#include "engine/tp.hpp"
#include "flashkit/engine.hpp"

namespace flashkit::engine {

// The session's device-argmax path when `sp` picks the argmax of the raw logits: temperature 0 without a repetition
// penalty, or top_k = 1 without a penalty when the maximum is unique (top-k keeps ties with the k-th value and draws
// among them; on a tie, and on an invalid row, the step falls back to the sampler on the downloaded logits, which
// also raises the sampler's errors). Null when it does not apply (Tuning::device_argmax off: FLASHKIT_DEVICE_ARGMAX=0).
inline DeviceGreedy* device_greedy(Session& session, const SamplerParams& sp) {
  const bool argmax_pick = sp.repetition_penalty == 1.0f && (sp.greedy() || sp.top_k == 1);
  auto* fast = argmax_pick ? dynamic_cast<DeviceGreedy*>(&session) : nullptr;
  return fast && fast->device_argmax_allowed() ? fast : nullptr;
}

// Feeds `token` (the last of `history`) and returns the next one.
inline int32_t plain_decode_step(Session& session, DeviceGreedy* fast, Sampler& sampler, const SamplerParams& sp,
                                 std::span<const int32_t> history, int32_t token) {
  if (fast) {
    const ArgmaxResult a = fast->decode_argmax(token);
    if (a.valid && (sp.greedy() || a.unique)) {
      // A top_k = 1 draw uses one PRNG number whatever it picks: keep the sampler's stream where the slow path leaves
      // it, so a later fallback (a tie) draws the same number.
      if (!sp.greedy()) sampler.next_uniform();
      return a.index;
    }
  } else {
    session.decode(token);
  }
  return sampler.sample(session.logits(), history);
}

}  // namespace flashkit::engine
