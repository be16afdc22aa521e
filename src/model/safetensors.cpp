// Hugging Face safetensors: an 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data section that the
// offsets are relative to. Sharded checkpoints add model.safetensors.index.json {"weight_map": {name: shard}}.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "core/json_io.hpp"
#include "core/limits.hpp"
#include "model/detail.hpp"

namespace flashkit::model {
namespace {

using detail::Bytes;
using detail::TensorStore;
using nlohmann::json;

constexpr uint64_t kMaxHeader = limits::kMaxSafetensorsHeader;

// The shared reader: depth checked by a flat pre-scan, then a plain parse. (A parse with a callback is quadratic
// in the entries of an object: nlohmann's callback parser rescans the parent after each child object to drop
// discarded values, which made a 100k-tensor header take a minute.)
json parse_json(const char* first, const char* last, const std::string& where) {
  return json_io::parse(std::string_view(first, size_t(last - first)), where);
}

// A JSON value rendered for a message, never more than a few dozen characters.
std::string brief(const json& v) {
  if (v.is_structured()) return v.is_array() ? "an array" : "an object";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

bool parse_dtype(const std::string& s, WeightType* t) {
  if (s == "F32")
    *t = WeightType::f32;
  else if (s == "F16")
    *t = WeightType::f16;
  else if (s == "BF16")
    *t = WeightType::bf16;
  else
    return false;
  return true;
}

struct Entry {
  WeightView view;
  uint64_t begin = 0, end = 0;
};

// Parses and validates one .safetensors file; every returned view points into `file`.
std::vector<Entry> read_file(const Bytes& file) {
  const std::string& f = file.label();
  if (file.size() < 8)
    fail(Status::invalid_argument,
         f + ": file is " + std::to_string(file.size()) + " bytes, too short for the 8-byte safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file.data()[i];
  if (n > kMaxHeader)
    fail(Status::invalid_argument,
         f + ": header length " + std::to_string(n) + " exceeds the 100 MB safetensors allows for a header");
  if (n > file.size() - 8)
    fail(Status::invalid_argument, f + ": header length " + std::to_string(n) + " exceeds the " +
                                       std::to_string(file.size() - 8) + " bytes after the length field");
  const char* hdr = reinterpret_cast<const char*>(file.data() + 8);
  json h = parse_json(hdr, hdr + n, f + ": header");
  if (!h.is_object()) fail(Status::invalid_argument, f + ": header is " + brief(h) + ", expected a JSON object");

  const uint64_t data_start = 8 + n;
  const uint64_t data_size = file.size() - data_start;
  const uint8_t* base = file.data() + data_start;
  std::vector<Entry> out;
  out.reserve(h.size());
  for (auto& [name, t] : h.items()) {
    if (name == "__metadata__") continue;  // free-form strings; nothing we need
    const std::string where = f + ": tensor '" + detail::printable(name) + "'";
    if (!t.is_object()) fail(Status::invalid_argument, where + " is " + brief(t) + ", expected an object");
    auto dt = t.find("dtype");
    auto sh = t.find("shape");
    auto off = t.find("data_offsets");
    if (dt == t.end() || !dt->is_string()) fail(Status::invalid_argument, where + " has no string 'dtype'");
    Entry e;
    e.view.name = name;
    const std::string dts = dt->get<std::string>();
    if (!parse_dtype(dts, &e.view.type))
      fail(Status::unsupported, f + ": unsupported dtype '" + detail::printable(dts.substr(0, 40)) + "' for tensor '" +
                                    detail::printable(name) + "' (flashkit reads F32, F16, BF16)");
    if (sh == t.end() || !sh->is_array()) fail(Status::invalid_argument, where + " has no 'shape' array");
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned())
        fail(Status::invalid_argument, where + " has shape entry " + brief(d) + ", expected a non-negative integer");
      const uint64_t v = d.get<uint64_t>();
      if (v > uint64_t(INT64_MAX) || !detail::mul_ok(numel, v, &numel) || numel > uint64_t(INT64_MAX))
        fail(Status::invalid_argument, where + " has a shape whose element count overflows");
      e.view.shape.push_back(int64_t(v));
    }
    if (off == t.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail(Status::invalid_argument, where + " has no 'data_offsets' [begin, end] of non-negative integers");
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    if (e.end < e.begin)
      fail(Status::invalid_argument, where + " has data_offsets [" + std::to_string(e.begin) + ", " +
                                         std::to_string(e.end) + ") with end before begin");
    uint64_t need = 0;
    if (!detail::storage_bytes(e.view.type, numel, &need) || need != e.end - e.begin)
      fail(Status::invalid_argument, where + ": shape " + detail::shape_str(e.view.shape) + " of " +
                                         weight_type_name(e.view.type) + " needs " +
                                         (need || numel == 0 ? std::to_string(need) : std::string("too many")) +
                                         " bytes but data_offsets span " + std::to_string(e.end - e.begin));
    if (e.end > data_size)
      fail(Status::invalid_argument, where + " data range [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                                         ") exceeds the data section of " + std::to_string(data_size) +
                                         " bytes (file size " + std::to_string(file.size()) + ")");
    e.view.data = base + e.begin;
    e.view.nbytes = size_t(e.end - e.begin);
    out.push_back(std::move(e));
  }
  // Tensors must not share bytes: an overlap means the header lies about at least one of them.
  std::vector<const Entry*> by_begin;
  for (const Entry& e : out)
    if (e.end > e.begin) by_begin.push_back(&e);
  std::sort(by_begin.begin(), by_begin.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_begin.size(); ++i)
    if (by_begin[i]->begin < by_begin[i - 1]->end)
      fail(Status::invalid_argument,
           f + ": tensors '" + detail::printable(by_begin[i - 1]->view.name) + "' [" +
               std::to_string(by_begin[i - 1]->begin) + ", " + std::to_string(by_begin[i - 1]->end) + ") and '" +
               detail::printable(by_begin[i]->view.name) + "' [" + std::to_string(by_begin[i]->begin) + ", " +
               std::to_string(by_begin[i]->end) + ") overlap");
  return out;
}

void add_all(TensorStore& store, const Bytes& file, std::vector<Entry>& entries) {
  for (Entry& e : entries) {
    detail::ensure_aligned(store, e.view);
    store.add(std::move(e.view), file.label());
  }
}

std::unique_ptr<WeightStore> open_single(const std::filesystem::path& file) {
  auto bytes = Bytes::map_file(file);
  auto store = std::make_unique<TensorStore>(bytes->label());
  auto entries = read_file(*bytes);
  add_all(*store, *bytes, entries);
  store->keep(std::move(bytes));
  return store;
}

std::unique_ptr<WeightStore> open_index(const std::filesystem::path& index_path) {
  const std::string ip = index_path.string();
  auto idx_bytes = Bytes::map_file(index_path);
  if (idx_bytes->size() > kMaxHeader)
    fail(Status::invalid_argument,
         ip + ": " + std::to_string(idx_bytes->size()) + " bytes is too large for an index file (limit 100 MB)");
  const char* p = reinterpret_cast<const char*>(idx_bytes->data());
  json idx = parse_json(p, p + idx_bytes->size(), ip);
  idx_bytes.reset();
  if (!idx.is_object()) fail(Status::invalid_argument, ip + ": expected a JSON object");
  auto wm = idx.find("weight_map");
  if (wm == idx.end() || !wm->is_object())
    fail(Status::invalid_argument, ip + ": no 'weight_map' object (expected {tensor name: shard file})");
  if (wm->empty()) fail(Status::invalid_argument, ip + ": 'weight_map' is empty");

  const std::filesystem::path dir = index_path.parent_path();
  // shard file name -> the tensors the index says it holds
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      fail(Status::invalid_argument,
           ip + ": weight_map['" + detail::printable(name) + "'] is " + brief(shard) + ", expected a file name");
    const std::string s = shard.get<std::string>();
    // Shards live next to the index; a path component would let the index point anywhere on disk.
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == ".." || s.find('\0') != std::string::npos)
      fail(Status::invalid_argument, ip + ": weight_map['" + detail::printable(name) + "'] = '" + detail::printable(s) +
                                         "' is not a plain file name in the checkpoint directory");
    by_shard[s].push_back(name);
  }
  auto store = std::make_unique<TensorStore>(ip);
  for (auto& [shard, names] : by_shard) {
    const std::filesystem::path sp = dir / shard;
    std::error_code ec;
    if (!std::filesystem::exists(sp, ec))
      fail(Status::invalid_argument, ip + ": weight_map sends '" + detail::printable(names.front()) + "' to shard '" +
                                         detail::printable(shard) + "', which does not exist in " +
                                         (dir.empty() ? "." : dir.string()));
    auto bytes = Bytes::map_file(sp);
    auto entries = read_file(*bytes);
    std::unordered_map<std::string, Entry*> by_name;
    for (Entry& e : entries) by_name[e.view.name] = &e;
    for (const std::string& n : names) {
      auto it = by_name.find(n);
      if (it == by_name.end())
        fail(Status::invalid_argument, ip + ": weight_map sends '" + detail::printable(n) + "' to shard '" +
                                           detail::printable(shard) + "', but that shard has no such tensor");
      detail::ensure_aligned(*store, it->second->view);
      store->add(std::move(it->second->view), bytes->label());
    }
    store->keep(std::move(bytes));
  }
  return store;
}

}  // namespace

std::unique_ptr<WeightStore> open_safetensors(const std::filesystem::path& dir_or_file) {
  std::error_code ec;
  const std::string p = dir_or_file.string();
  if (std::filesystem::is_directory(dir_or_file, ec)) {
    const auto index = dir_or_file / "model.safetensors.index.json";
    const auto single = dir_or_file / "model.safetensors";
    if (std::filesystem::exists(index, ec)) return open_index(index);
    if (std::filesystem::exists(single, ec)) return open_single(single);
    fail(Status::invalid_argument, p + ": no model.safetensors or model.safetensors.index.json in this directory");
  }
  if (!std::filesystem::exists(dir_or_file, ec))
    fail(Status::invalid_argument, p + ": no such file or directory (expected a checkpoint directory or a "
                                       ".safetensors file)");
  if (dir_or_file.extension() == ".json") return open_index(dir_or_file);
  return open_single(dir_or_file);
}

std::unique_ptr<WeightStore> open_safetensors_memory(const void* data, size_t size, const std::string& label) {
  auto bytes = Bytes::borrow(data, size, label);
  auto store = std::make_unique<TensorStore>(label);
  auto entries = read_file(*bytes);
  add_all(*store, *bytes, entries);
  store->keep(std::move(bytes));
  return store;
}

}  // namespace flashkit::model
