// libFuzzer target: one config.json from memory through the shared JSON reader and the engine's config validator,
// then the sizes and RoPE tables the engine derives from an accepted config. Accepted outcomes: success or
// flashkit::Error; a crash, another exception, or a derived value that is not finite is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/json_io.hpp"
#include "engine/config.hpp"
#include "flashkit/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = flashkit::json_io::parse(text, "config.json");
    const flashkit::engine::ModelConfig c = flashkit::engine::parse_config(j, "config.json");
    if (flashkit::engine::weight_count(c) <= 0) std::abort();
    for (const auto* rc : {&c.rope_global, &c.rope_local})
      for (float f : flashkit::engine::rope_inv_freq(*rc, c.head_dim))
        if (!std::isfinite(f) || !(f > 0)) std::abort();  // an accepted config must give usable frequencies
    if (!std::isfinite(c.attn_scale) || !(c.attn_scale > 0) || !std::isfinite(c.embed_scale)) std::abort();
  } catch (const flashkit::Error&) {
  }
  return 0;
}
