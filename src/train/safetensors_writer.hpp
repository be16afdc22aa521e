// A small safetensors writer (the format flashkit's reader in src/model and Hugging Face read): an 8-byte
// little-endian header length, the JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}} padded
// with spaces to a multiple of 8 bytes, then the tensors back to back. Written atomically (io.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace flashkit::train {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // "F32", "BF16", "F16"
  std::vector<int64_t> shape;
  const void* data = nullptr;   // host bytes
  size_t nbytes = 0;            // must equal numel * element size
};

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace flashkit::train
