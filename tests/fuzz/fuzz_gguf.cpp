// libFuzzer target: one GGUF file from memory, then everything built from it (config, tokenizer JSON).
#include "fuzz_common.hpp"
#include "model/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    flashkit::model::read_gguf_header(data, size, "fuzz.gguf");
  } catch (const flashkit::Error&) {
  }
  try {
    auto s = flashkit::model::open_gguf_memory(data, size, "fuzz.gguf");
    fk_fuzz::touch_all(*s);
    try {
      flashkit::model::gguf_hf_config(*s);
    } catch (const flashkit::Error&) {
    }
    try {
      flashkit::model::gguf_tokenizer_json(*s);
    } catch (const flashkit::Error&) {
    }
  } catch (const flashkit::Error&) {
  }
  return 0;
}
