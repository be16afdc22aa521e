// libFuzzer target: one tokenizer.json from memory, then encode / decode / stream-decode of short texts with it.
// Accepted outcomes: success or flashkit::Error; anything else (another exception, a crash, a sanitizer report,
// a hang past -timeout) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"

namespace {
const char* const kTexts[] = {
    "Hello world! It's 2024: 1,234.5 <s></s><unk> \xE2\x96\x81\xE2\x96\x81x",
    "  \t\n\nGr\xC3\xBC\xC3\x9F" "e \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 e\xCC\x81 <|eot_id|><start_of_turn>",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbb",
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const flashkit::Tokenizer t = flashkit::Tokenizer::from_json(json);
    for (const char* text : kTexts) {
      try {
        const std::vector<int32_t> ids = t.encode(text, true);
        (void)t.decode(ids);
        auto d = t.stream_decoder();
        for (int32_t id : ids) (void)d.push(id);
        (void)d.flush();
      } catch (const flashkit::Error&) {
      }
    }
    // Every id the tokenizer claims, decoded one by one (the decoder's view of each vocabulary entry).
    const int32_t n = t.vocab_size() < 512 ? t.vocab_size() : 512;
    for (int32_t id = 0; id < n; ++id) {
      try {
        (void)t.decode(std::vector<int32_t>{id});
        (void)t.token_text(id);
      } catch (const flashkit::Error&) {
      }
    }
  } catch (const flashkit::Error&) {
  }
  return 0;
}
