// Named weight tensors of a checkpoint, memory-mapped where the file format allows. One interface, two
// formats: Hugging Face safetensors (single file or sharded with model.safetensors.index.json) and GGUF.
// Readers validate everything they read from disk (header JSON, offsets, sizes, dtypes) and throw
// flashkit::Error(Status::invalid_argument, "<file>: <what is wrong>") -- never crash on a bad file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"

namespace flashkit::model {

// The element type as stored on disk. The GGUF block-quantized types (model/quant.hpp) run along rows: Q8_0 and Q4_0
// in blocks of 32 values, the K-quants Q4_K, Q5_K, Q6_K in blocks of 256.
enum class WeightType { f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k };
const char* weight_type_name(WeightType t);

struct WeightView {
  std::string name;            // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  WeightType type = WeightType::f32;
  std::vector<int64_t> shape;  // row-major, outermost first, as PyTorch reports it ([out, in] for a Linear)
  const void* data = nullptr;  // into the mapped file (or a store-owned copy); valid while the store lives; aligned
                               // to the element size (2 bytes for quantized blocks)
  size_t nbytes = 0;
  int64_t numel() const;
};

class WeightStore {
 public:
  virtual ~WeightStore() = default;
  // nullptr when absent.
  virtual const WeightView* find(std::string_view name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // Where the weights came from (for messages).
  virtual std::string source() const = 0;
  // Throws invalid_argument naming the tensor and the checkpoint when absent.
  const WeightView& get(std::string_view name) const;
};

// Converts any stored weight to f32 (dequantizing the quantized types); `out` must hold numel() floats.
void to_f32(const WeightView& w, float* out);
// Converts any stored weight to bf16 (round to nearest even; bf16 is copied); `out` must hold numel() values.
void to_bf16(const WeightView& w, uint16_t* out);

// Index of the first NaN or +-inf element of `w` (for quantized types, of the first non-finite dequantized value,
// which can only come from a non-finite block scale), or -1 when every value is finite. Float types: a branch-free
// scan of the bits, so it costs about as much as reading the tensor once; quantized types expand block by block.
int64_t first_non_finite(const WeightView& w);
// Throws invalid_argument "<source>: tensor '<name>' holds <inf|NaN> at element i ([row, col]) ..." when
// first_non_finite finds one: a non-finite weight makes every logit garbage without any error later.
void check_finite(const WeightView& w, const std::string& source);

// A Hugging Face model directory (or a single .safetensors file): model.safetensors or the sharded index.
std::unique_ptr<WeightStore> open_safetensors(const std::filesystem::path& dir_or_file);
// One safetensors file already in memory (fuzzers, tests); `data` must outlive the store, `label` names it in messages.
std::unique_ptr<WeightStore> open_safetensors_memory(const void* data, size_t size, const std::string& label);
// A GGUF file; tensor names are mapped to Hugging Face names (blk.N.attn_q.weight -> model.layers.N.self_attn.
// q_proj.weight, ...) and the llama.cpp Q/K row permutation for Llama is undone, so the engine sees one layout.
// Gemma 3 norm weights, stored by llama.cpp as 1 + w, come back as w in f32. Types F32, F16, BF16, Q8_0, Q4_0, Q4_K,
// Q5_K, Q6_K; any other tensor type, or an architecture other than llama / gemma3 / qwen2 / qwen3, is
// Status::unsupported. Tensors with no HF
// counterpart keep their GGUF name (rope_freqs.weight). Metadata and an HF config.json: see model/gguf.hpp.
std::unique_ptr<WeightStore> open_gguf(const std::filesystem::path& file);
// A GGUF file already in memory; `data` must outlive the store. Metadata and config: see model/gguf.hpp.
std::unique_ptr<WeightStore> open_gguf_memory(const void* data, size_t size, const std::string& label);

}  // namespace flashkit::model
