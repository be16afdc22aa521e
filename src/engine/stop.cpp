#include "engine/stop.hpp"

#include <algorithm>

#include "flashkit/error.hpp"
#include "core/utf8.hpp"

namespace flashkit::engine {
namespace {

// Bytes at the end of s that form an incomplete UTF-8 sequence (0 when s ends on a boundary).
size_t incomplete_utf8_tail(std::string_view s) { return s.size() - utf8_complete_prefix(s); }

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stop_strings, std::vector<int32_t> stop_token_ids,
                         bool hold_partial_utf8)
    : strings_(std::move(stop_strings)), tokens_(std::move(stop_token_ids)), hold_utf8_(hold_partial_utf8) {
  for (const auto& s : strings_) {
    if (s.empty()) fail(Status::invalid_argument, "stop strings: an empty stop string would stop at once");
    max_len_ = std::max(max_len_, s.size());
  }
  std::sort(tokens_.begin(), tokens_.end());
  tokens_.erase(std::unique(tokens_.begin(), tokens_.end()), tokens_.end());
}

bool StopMatcher::is_stop_token(int32_t token) const {
  return std::binary_search(tokens_.begin(), tokens_.end(), token);
}

void StopMatcher::reset() {
  pending_.clear();
  emitted_.clear();
  stopped_ = false;
  matched_string_.reset();
  matched_token_.reset();
}

StopStep StopMatcher::emit(std::string text, bool stop) {
  emitted_ += text;
  stopped_ = stop;
  return StopStep{std::move(text), stop};
}

StopStep StopMatcher::push(int32_t token, std::string_view piece) {
  if (stopped_) return {"", true};
  if (is_stop_token(token)) {
    // The held-back text was not a stop string after all: release it; the stop token's text is dropped.
    matched_token_ = token;
    std::string out = std::move(pending_);
    pending_.clear();
    return emit(std::move(out), true);
  }
  return push_text(piece);
}

StopStep StopMatcher::push_text(std::string_view piece) {
  if (stopped_) return {"", true};
  pending_.append(piece);

  // Earliest stop string anywhere in the pending text. Earlier text was emitted only once no stop string
  // could start in it, so a match always lies inside pending_.
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : strings_) {
    const size_t pos = pending_.find(s);
    if (pos != std::string::npos && (pos < best || (pos == best && s.size() > which->size()))) {
      best = pos;
      which = &s;
    }
  }
  if (which) {
    matched_string_ = *which;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return emit(std::move(out), true);
  }

  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  const size_t limit = std::min(pending_.size(), max_len_ > 0 ? max_len_ - 1 : 0);
  for (size_t len = limit; len > 0 && hold == 0; --len) {
    const std::string_view tail = std::string_view(pending_).substr(pending_.size() - len);
    for (const auto& s : strings_)
      if (s.size() > len && std::string_view(s).substr(0, len) == tail) {
        hold = len;
        break;
      }
  }
  if (hold_utf8_) hold += incomplete_utf8_tail(std::string_view(pending_).substr(0, pending_.size() - hold));
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return emit(std::move(out), false);
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  std::string out = std::move(pending_);
  pending_.clear();
  emitted_ += out;
  return out;
}

}  // namespace flashkit::engine
