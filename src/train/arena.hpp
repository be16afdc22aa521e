// The parameter table: every trainable tensor is a (name, offset, shape) range of ONE flat arena. Parameters,
// gradients and both Adam moments use the same table, so the optimizer, the gradient norm and zeroing are single
// calls over contiguous memory, a checkpoint is three flat tensors plus this table, and ZeRO-1 sharding later
// splits one range per rank.
//
// Layout: weight-decayed matrices first, then the tensors without decay (embeddings, norms), so AdamW runs as two
// calls. Inside a layer q|k|v and gate|up are adjacent without padding: the model multiplies by the fused
// [q_dim + 2 kv_dim, hidden] and [2 F, hidden] matrices in one GEMM. Other entries start at multiples of 16
// elements (64-byte aligned f32).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flashkit::train {

struct ParamEntry {
  std::string name;            // Hugging Face name ("model.layers.0.self_attn.q_proj.weight")
  int64_t offset = 0;          // elements from the arena start
  std::vector<int64_t> shape;  // [out, in] for matrices, [n] for vectors
  bool decay = false;          // AdamW weight decay applies
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class ParamTable {
 public:
  // Appends `name` right after the previous entry (no padding) or at the next 16-element boundary.
  const ParamEntry& add(const std::string& name, std::vector<int64_t> shape, bool decay, bool pad = true) {
    int64_t off = size_;
    if (pad) off = (off + 15) / 16 * 16;
    entries_.push_back(ParamEntry{name, off, std::move(shape), decay});
    size_ = off + entries_.back().numel();
    return entries_.back();
  }
  void pad() { size_ = (size_ + 15) / 16 * 16; }
  int64_t size() const { return size_; }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  const ParamEntry* find(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  // [begin, end) of the weight-decayed prefix.
  int64_t decay_end() const {
    int64_t end = 0;
    for (const auto& e : entries_)
      if (e.decay) end = e.offset + e.numel();
    return end;
  }
  int64_t parameter_count() const {
    int64_t n = 0;
    for (const auto& e : entries_) n += e.numel();
    return n;
  }

 private:
  std::vector<ParamEntry> entries_;
  int64_t size_ = 0;
};

}  // namespace flashkit::train
