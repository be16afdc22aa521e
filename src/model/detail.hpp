// Internals shared by the checkpoint readers (not part of the engine-facing interface).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flashkit/error.hpp"
#include "model/weights.hpp"

namespace flashkit::model::detail {

// Read-only bytes of one checkpoint file: an mmap of a file, or memory the caller keeps alive (fuzzers, tests).
class Bytes {
 public:
  // Maps a regular file read-only; throws invalid_argument naming the path when it cannot.
  static std::shared_ptr<const Bytes> map_file(const std::filesystem::path& path);
  // Wraps memory owned by the caller; `label` names it in messages.
  static std::shared_ptr<const Bytes> borrow(const void* data, size_t size, std::string label);
  ~Bytes();
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& label() const { return label_; }

 private:
  Bytes() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::string label_;
};

// A name -> view table plus what keeps the views' memory alive.
class TensorStore : public WeightStore {
 public:
  explicit TensorStore(std::string source) : source_(std::move(source)) {}
  const WeightView* find(std::string_view name) const override;
  std::vector<std::string> names() const override;
  std::string source() const override { return source_; }

  void keep(std::shared_ptr<const Bytes> b) { files_.push_back(std::move(b)); }
  // 8-byte aligned scratch owned by the store (for tensors that had to be copied: realigned, permuted, un-offset).
  void* own(size_t nbytes);
  // Throws when the name is already present (a checkpoint listing a tensor twice is malformed).
  void add(WeightView v, const std::string& where);
  WeightView* find_mutable(std::string_view name);
  size_t size() const { return views_.size(); }

 private:
  std::string source_;
  std::map<std::string, WeightView, std::less<>> views_;
  std::vector<std::shared_ptr<const Bytes>> files_;
  std::vector<std::unique_ptr<uint64_t[]>> owned_;
};

// Overflow-checked arithmetic on sizes read from disk; false on overflow.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool add_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

// Bytes per element for the plain types; Q8_0 is handled by storage_bytes.
size_t element_size(WeightType t);
// Bytes needed for `numel` elements of `t`; false when numel is not storable in that type (Q8_0: not a multiple of 32)
// or the size overflows.
bool storage_bytes(WeightType t, uint64_t numel, uint64_t* out);

// Makes `v.data` aligned to its element size, copying into the store when the file placed it misaligned.
void ensure_aligned(TensorStore& store, WeightView& v);

// A name or key from a file, safe to put in a message: printable ASCII only (others become '?'), at most 100 chars.
std::string printable(std::string_view s);

// Short rendering of a shape for messages: [256, 64].
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace flashkit::model::detail
