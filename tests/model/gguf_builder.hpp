// Builds GGUF bytes in tests, including deliberately broken ones (wrong counts, offsets, types).
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace fk_test {

inline void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
inline void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
inline void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}

struct GgufBuilder {
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string data;
    std::optional<uint64_t> offset;  // override the computed one
  };
  std::string kv;
  uint64_t n_kv = 0;
  std::vector<Tensor> tensors;
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::optional<uint64_t> n_tensors_override, n_kv_override;

  GgufBuilder& raw(const std::string& key, uint32_t type, const std::string& value_bytes) {
    put_str(kv, key);
    put_u32(kv, type);
    kv += value_bytes;
    ++n_kv;
    return *this;
  }
  GgufBuilder& u32(const std::string& key, uint32_t v) {
    std::string b;
    put_u32(b, v);
    return raw(key, 4, b);
  }
  GgufBuilder& f32(const std::string& key, float v) {
    std::string b(reinterpret_cast<const char*>(&v), 4);
    return raw(key, 6, b);
  }
  GgufBuilder& str(const std::string& key, const std::string& v) {
    std::string b;
    put_str(b, v);
    return raw(key, 8, b);
  }
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, std::string data,
                      std::optional<uint64_t> offset = std::nullopt) {
    tensors.push_back({name, std::move(ne), type, std::move(data), offset});
    return *this;
  }
  // A minimal llama header so open_gguf gets as far as the tensors.
  GgufBuilder& llama(uint32_t heads = 1, uint32_t kv_heads = 1) {
    str("general.architecture", "llama");
    u32("llama.attention.head_count", heads);
    return u32("llama.attention.head_count_kv", kv_heads);
  }

  std::string build() const {
    std::string s = "GGUF";
    put_u32(s, version);
    put_u64(s, n_tensors_override.value_or(tensors.size()));
    put_u64(s, n_kv_override.value_or(n_kv));
    s += kv;
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (const auto& t : tensors) {
      offs.push_back(t.offset.value_or(off));
      off += (t.data.size() + alignment - 1) / alignment * alignment;
      put_str(s, t.name);
      put_u32(s, uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) put_u64(s, d);
      put_u32(s, t.type);
      put_u64(s, offs.back());
    }
    s.append((alignment - s.size() % alignment) % alignment, '\0');
    for (const auto& t : tensors) {
      s += t.data;
      s.append((alignment - t.data.size() % alignment) % alignment, '\0');
    }
    return s;
  }
};

inline std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

}  // namespace fk_test
