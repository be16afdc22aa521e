// Speculative decoding: generate() with GenerateOptions::speculative set comes here (docs/speculative.md).
//
// One step: the pending token (the last one produced, not yet in the target's cache) and the proposer's guesses go
// through the target in one forward pass (Session::forward_all_logits for a chain, forward_tree for a token tree);
// the rows' logits decide, token by token, how much of the guess stands (greedy: the target's own choice must equal
// the guess; sampling: spec/accept.hpp), the first disagreement is replaced by the target's token, and the cache is
// rolled back to what was accepted (Session::truncate / accept_tree_path). The prompt is prefilled and its first
// token sampled exactly as generate() does, so greedy output equals plain decoding token for token.
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "flashkit/engine.hpp"
#include "spec/accept.hpp"

namespace flashkit::spec {

struct TestHooks {
  AcceptRule rule = AcceptRule::exact;
};

GenerationResult generate(Session& target, std::span<const int32_t> prompt, const GenerateOptions& opts,
                          const std::function<bool(int32_t)>& on_token, const TestHooks* hooks = nullptr);

}  // namespace flashkit::spec
