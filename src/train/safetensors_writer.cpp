#include "train/safetensors_writer.hpp"

#include <cstring>

#include <nlohmann/json.hpp>

#include "flashkit/error.hpp"
#include "train/io.hpp"

namespace flashkit::train {

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    const size_t es = t.dtype == "F32" ? 4 : (t.dtype == "BF16" || t.dtype == "F16") ? 2 : 0;
    if (!es) fail(Status::internal, "safetensors writer: dtype " + t.dtype);
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    if (numel * es != t.nbytes) fail(Status::internal, "safetensors writer: " + t.name + " size mismatch");
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.nbytes}}};
    off += t.nbytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t hlen = h.size();
  write_file_atomic(path, [&](const std::function<void(const void*, size_t)>& put) {
    char len[8];
    std::memcpy(len, &hlen, 8);
    put(len, 8);
    put(h.data(), h.size());
    for (const auto& t : tensors) put(t.data, t.nbytes);
  });
}

}  // namespace flashkit::train
