// GGUF checkpoints (llama.cpp's format): the parsed header, the metadata as JSON, and a Hugging Face style
// config.json built from that metadata so the engine parses one config format for both checkpoint kinds.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/weights.hpp"

namespace flashkit::model {

// One tensor as the GGUF file describes it, before name mapping or any layout change.
struct GgufTensorInfo {
  std::string name;          // llama.cpp name, e.g. "blk.0.attn_q.weight"
  uint32_t ggml_type = 0;    // GGML_TYPE_* number
  std::vector<uint64_t> ne;  // dims innermost first (ne[0] is contiguous); PyTorch shape is the reverse
  uint64_t offset = 0;       // from the start of the data section
  uint64_t nbytes = 0;       // 0 for types flashkit cannot size
};

struct GgufHeader {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // absolute file offset of the data section
  nlohmann::json metadata;   // key -> value; arrays (nested too) become JSON arrays, integers keep their sign
  std::vector<GgufTensorInfo> tensors;
};

// Parses and validates the header of a GGUF v2/v3 file held in memory (tensor data ranges included); throws
// flashkit::Error naming `label` on anything malformed. Unsupported tensor types are reported by open_gguf, not here.
GgufHeader read_gguf_header(const void* data, size_t size, const std::string& label);
GgufHeader read_gguf_header(const std::filesystem::path& file);

// "Q4_K" for 12, "type 99" for numbers ggml does not define.
std::string ggml_type_name(uint32_t type);

// The metadata of a store opened with open_gguf/open_gguf_memory; throws invalid_argument for other stores.
const nlohmann::json& gguf_metadata(const WeightStore& store);

// A Hugging Face config.json equivalent for a GGUF store of architecture llama or gemma3 (model_type "llama" /
// "gemma3_text"); fields and their format follow the transformers 5 config.json files in tests/data/models
// (rope_parameters), plus the legacy rope_theta / rope_scaling / rope_local_base_freq spellings.
nlohmann::json gguf_hf_config(const WeightStore& store);

// Stretch: tokenizer.ggml.* metadata as a tokenizer.json-like object {"model": {"type": "BPE"|"Unigram", "vocab",
// "merges"?, "scores"?}, "added_tokens": [...control tokens...], "bos_token_id", "eos_token_id", ...}.
nlohmann::json gguf_tokenizer_json(const WeightStore& store);

// Either checkpoint kind behind one call: a directory or .safetensors/.json file gives the safetensors store and
// the directory's config.json; a .gguf file gives the GGUF store and gguf_hf_config of it.
struct Checkpoint {
  std::unique_ptr<WeightStore> weights;
  nlohmann::json config;
};
Checkpoint open_checkpoint(const std::filesystem::path& path);

}  // namespace flashkit::model
