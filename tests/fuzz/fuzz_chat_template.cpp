// libFuzzer target: arbitrary bytes as a chat template, parsed and rendered against a fixed conversation under
// a tight render budget (chat_fuzz_input.hpp). Only flashkit::Error may come out.
#include "chat_fuzz_input.hpp"
#include "flashkit/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    fk_fuzz::render_fuzz_template(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const flashkit::Error&) {
  }
  return 0;
}
