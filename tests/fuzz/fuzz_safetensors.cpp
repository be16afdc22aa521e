// libFuzzer target: one safetensors file from memory.
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto s = flashkit::model::open_safetensors_memory(data, size, "fuzz.safetensors");
    fk_fuzz::touch_all(*s);
  } catch (const flashkit::Error&) {
  }
  return 0;
}
