// Stop handling for streaming generation over detokenized text.
//
// The generation loop feeds every new token with the text it adds (the incremental detokenizer's piece).
// StopMatcher answers, per token, the text that is safe to show now and whether generation must stop:
//   - a stop token id (eos, <end_of_turn>, <|eot_id|>, ...) stops at once; its own text is not emitted;
//   - a stop string (any of several) stops as soon as it appears anywhere in the generated text, even split
//     across tokens; the output is trimmed just before it (the stop string and anything after it are dropped);
//   - text that could still be the beginning of a stop string is held back until it is decided;
//   - optionally (on by default) an incomplete UTF-8 sequence at the end is held back too, so a terminal
//     never receives half a character.
// flush() releases what is held back when generation ends for another reason (length limit).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashkit::engine {

struct StopStep {
  std::string text;   // safe to emit now (may be empty)
  bool stop = false;  // generation must end; text is the last output
};

class StopMatcher {
 public:
  // Empty stop strings are rejected (invalid_argument). Duplicates are fine.
  StopMatcher(std::vector<std::string> stop_strings, std::vector<int32_t> stop_token_ids,
              bool hold_partial_utf8 = true);

  // Next token and the text it adds. After a stop, returns {"", true} without looking at its arguments.
  StopStep push(int32_t token, std::string_view piece);
  // Text only (no token id to check), e.g. for text that does not come from a sampled token.
  StopStep push_text(std::string_view piece);
  // Releases the held-back text (generation ended without a stop). Empty after a stop.
  std::string flush();

  bool is_stop_token(int32_t token) const;
  bool stopped() const { return stopped_; }
  // What stopped generation: the stop string matched or the stop token seen (empty before a stop).
  const std::optional<std::string>& matched_string() const { return matched_string_; }
  const std::optional<int32_t>& matched_token() const { return matched_token_; }
  // All text emitted so far (concatenation of every returned text).
  const std::string& emitted() const { return emitted_; }
  // Text currently held back.
  const std::string& held() const { return pending_; }
  // Starts a new generation with the same stop set.
  void reset();

 private:
  StopStep emit(std::string text, bool stop);

  std::vector<std::string> strings_;
  std::vector<int32_t> tokens_;  // sorted
  bool hold_utf8_;
  size_t max_len_ = 0;
  std::string pending_;  // held back: could begin a stop string (or completes a UTF-8 sequence)
  std::string emitted_;
  bool stopped_ = false;
  std::optional<std::string> matched_string_;
  std::optional<int32_t> matched_token_;
};

}  // namespace flashkit::engine
