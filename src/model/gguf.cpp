// GGUF reader. Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count, the metadata
// key/values, the tensor infos (name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset), padding to
// general.alignment, then the data section the offsets are relative to. Names and layouts are mapped back to the
// Hugging Face checkpoint the file was converted from: llama.cpp's converter permutes Llama q/k rows for its
// interleaved RoPE and stores Gemma 3 norm weights plus one; both are undone here (copies owned by the store).
#include "model/gguf.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "core/json_io.hpp"
#include "core/limits.hpp"
#include "model/detail.hpp"
#include "model/quant.hpp"

namespace flashkit::model {
namespace {

using detail::Bytes;
using nlohmann::json;

enum GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

constexpr uint32_t kTypeF32 = 0, kTypeF16 = 1, kTypeQ4_0 = 2, kTypeQ8_0 = 8, kTypeQ4_K = 12, kTypeQ5_K = 13,
                   kTypeQ6_K = 14, kTypeBF16 = 30;
constexpr int kMaxArrayDepth = limits::kMaxGgufArrayDepth;
constexpr uint64_t kMaxArrayLen = limits::kMaxGgufArrayLength;
constexpr uint32_t kMaxDims = 4;               // GGML_MAX_DIMS

// Bounds-checked little-endian cursor over the file.
class Cursor {
 public:
  Cursor(const Bytes& b) : p_(b.data()), n_(b.size()), label_(b.label()) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }
  const std::string& label() const { return label_; }

  void need(uint64_t k, const char* what) const {
    if (k > left())
      fail(Status::invalid_argument, label_ + ": truncated: " + what + " needs " + std::to_string(k) +
                                         " bytes at offset " + std::to_string(pos_) + " but the file is " +
                                         std::to_string(n_) + " bytes");
  }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));  // GGUF is little-endian, as is every host we build for
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t len = get<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
  std::string label_;
};

// Smallest encoding of one value of each type, so a claimed count can be checked against the bytes left.
uint64_t min_value_bytes(uint32_t t) {
  switch (t) {
    case kU8:
    case kI8:
    case kBool: return 1;
    case kU16:
    case kI16: return 2;
    case kU32:
    case kI32:
    case kF32: return 4;
    case kU64:
    case kI64:
    case kF64:
    case kString: return 8;
    case kArray: return 12;
  }
  return 1;
}

using detail::printable;

json read_value(Cursor& c, uint32_t type, const std::string& key, int depth) {
  switch (type) {
    case kU8: return c.get<uint8_t>("a u8 value");
    case kI8: return c.get<int8_t>("an i8 value");
    case kU16: return c.get<uint16_t>("a u16 value");
    case kI16: return c.get<int16_t>("an i16 value");
    case kU32: return c.get<uint32_t>("a u32 value");
    case kI32: return c.get<int32_t>("an i32 value");
    case kF32: return double(c.get<float>("an f32 value"));
    case kBool: return c.get<uint8_t>("a bool value") != 0;
    case kString: return c.str("a string value");
    case kU64: return c.get<uint64_t>("a u64 value");
    case kI64: return c.get<int64_t>("an i64 value");
    case kF64: return c.get<double>("an f64 value");
    case kArray: {
      if (depth >= kMaxArrayDepth)
        fail(Status::invalid_argument, c.label() + ": metadata '" + printable(key) + "' nests arrays deeper than " +
                                           std::to_string(kMaxArrayDepth));
      const uint32_t et = c.get<uint32_t>("an array element type");
      if (et > kF64)
        fail(Status::invalid_argument, c.label() + ": metadata '" + printable(key) + "' has array element type " +
                                           std::to_string(et) + " (GGUF value types are 0..12)");
      const uint64_t n = c.get<uint64_t>("an array length");
      if (n > kMaxArrayLen || n > c.left() / min_value_bytes(et))
        fail(Status::invalid_argument, c.label() + ": metadata '" + printable(key) + "' claims " + std::to_string(n) +
                                           " array elements but only " + std::to_string(c.left()) +
                                           " bytes remain in the file");
      json a = json::array();
      a.get_ref<json::array_t&>().reserve(size_t(n));
      for (uint64_t i = 0; i < n; ++i) a.push_back(read_value(c, et, key, depth + 1));
      return a;
    }
  }
  fail(Status::invalid_argument, c.label() + ": metadata '" + printable(key) + "' has value type " +
                                     std::to_string(type) + " (GGUF value types are 0..12)");
}

std::optional<WeightType> weight_type_of(uint32_t t) {
  switch (t) {
    case kTypeF32: return WeightType::f32;
    case kTypeF16: return WeightType::f16;
    case kTypeBF16: return WeightType::bf16;
    case kTypeQ8_0: return WeightType::q8_0;
    case kTypeQ4_0: return WeightType::q4_0;
    case kTypeQ4_K: return WeightType::q4_k;
    case kTypeQ5_K: return WeightType::q5_k;
    case kTypeQ6_K: return WeightType::q6_k;
  }
  return std::nullopt;
}

// Bytes of a tensor of a type flashkit reads; nullopt for other types or sizes that overflow.
std::optional<uint64_t> tensor_bytes(uint32_t type, const std::vector<uint64_t>& ne) {
  const auto wt = weight_type_of(type);
  if (!wt) return std::nullopt;
  // Quantized blocks run along rows: a row must be whole blocks.
  if (!ne.empty() && ne[0] % uint64_t(quant_block(*wt).values) != 0) return std::nullopt;
  uint64_t n = 1;
  for (uint64_t d : ne)
    if (!detail::mul_ok(n, d, &n)) return std::nullopt;
  uint64_t b;
  if (n > uint64_t(INT64_MAX) || !detail::storage_bytes(*wt, n, &b)) return std::nullopt;
  return b;
}

GgufHeader parse_header(const Bytes& file) {
  Cursor c(file);
  const std::string& f = file.label();
  GgufHeader h;
  if (file.size() < 4 || std::memcmp(file.data(), "GGUF", 4) != 0)
    fail(Status::invalid_argument, f + ": not a GGUF file (the first 4 bytes are not the magic \"GGUF\")");
  c.get<uint32_t>("the magic");
  h.version = c.get<uint32_t>("the version");
  if (h.version != 2 && h.version != 3)
    fail(Status::unsupported, f + ": GGUF version " + std::to_string(h.version) + " (flashkit reads versions 2 and 3)");
  const uint64_t n_tensors = c.get<uint64_t>("the tensor count");
  const uint64_t n_kv = c.get<uint64_t>("the metadata count");
  // Each key/value takes at least 13 bytes and each tensor info at least 24: a count beyond that is a lie.
  if (n_kv > c.left() / 13)
    fail(Status::invalid_argument, f + ": metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                                       std::to_string(c.left()) + " bytes after the header");
  if (n_tensors > c.left() / 24)
    fail(Status::invalid_argument, f + ": tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                                       std::to_string(c.left()) + " bytes after the header");

  h.metadata = json::object();
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str("a metadata key");
    const uint32_t type = c.get<uint32_t>("a metadata value type");
    json v = read_value(c, type, key, 0);
    if (h.metadata.contains(key))
      fail(Status::invalid_argument, f + ": metadata key '" + printable(key) + "' appears twice");
    h.metadata[key] = std::move(v);
  }
  if (auto it = h.metadata.find("general.alignment"); it != h.metadata.end()) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() == 0 || it->get<uint64_t>() > (1u << 30) ||
        (it->get<uint64_t>() & (it->get<uint64_t>() - 1)) != 0)
      fail(Status::invalid_argument, f + ": general.alignment must be a power of two up to 2^30");
    h.alignment = it->get<uint64_t>();
  }

  h.tensors.reserve(size_t(n_tensors));
  std::unordered_set<std::string> seen;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.str("a tensor name");
    const std::string where = f + ": tensor '" + printable(t.name) + "'";
    if (!seen.insert(t.name).second) fail(Status::invalid_argument, where + " is listed twice");
    const uint32_t nd = c.get<uint32_t>("a tensor's dimension count");
    if (nd > kMaxDims)
      fail(Status::invalid_argument,
           where + " has " + std::to_string(nd) + " dimensions (at most " + std::to_string(kMaxDims) + ")");
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t v = c.get<uint64_t>("a tensor dimension");
      if (v > uint64_t(INT64_MAX))
        fail(Status::invalid_argument, where + " has dimension " + std::to_string(v) + " beyond 2^63");
      t.ne.push_back(v);
    }
    t.ggml_type = c.get<uint32_t>("a tensor type");
    t.offset = c.get<uint64_t>("a tensor offset");
    if (t.offset % h.alignment != 0)
      fail(Status::invalid_argument, where + " has offset " + std::to_string(t.offset) +
                                         ", not a multiple of the alignment " + std::to_string(h.alignment));
    if (weight_type_of(t.ggml_type)) {
      auto b = tensor_bytes(t.ggml_type, t.ne);
      if (!b) {
        std::string ne;
        for (uint64_t d : t.ne) ne += (ne.empty() ? "" : ", ") + std::to_string(d);
        const uint64_t per_block = uint64_t(quant_block(*weight_type_of(t.ggml_type)).values);
        if (per_block > 1 && (t.ne.empty() ? 1 : t.ne[0]) % per_block != 0)
          fail(Status::invalid_argument, where + " of type " + ggml_type_name(t.ggml_type) + " has dims [" + ne +
                                             "]: its rows (dim 0) are not whole " + std::to_string(per_block) +
                                             "-element blocks");
        fail(Status::invalid_argument,
             where + " of type " + ggml_type_name(t.ggml_type) + " has dims [" + ne + "] whose byte size overflows");
      }
      t.nbytes = *b;
    }
    h.tensors.push_back(std::move(t));
  }
  uint64_t start = c.pos();
  if (!detail::add_ok(start, h.alignment - 1, &start))
    fail(Status::invalid_argument, f + ": data section offset overflows");
  h.data_offset = start / h.alignment * h.alignment;
  if (!h.tensors.empty() && h.data_offset > file.size())
    fail(Status::invalid_argument, f + ": data section would start at " + std::to_string(h.data_offset) +
                                       ", past the end of the " + std::to_string(file.size()) + "-byte file");
  const uint64_t data_size = h.data_offset <= file.size() ? file.size() - h.data_offset : 0;
  for (const auto& t : h.tensors) {
    uint64_t end;
    if (t.nbytes == 0 && !weight_type_of(t.ggml_type)) continue;  // sized by open_gguf's unsupported-type check
    if (!detail::add_ok(t.offset, t.nbytes, &end) || end > data_size)
      fail(Status::invalid_argument, f + ": tensor '" + printable(t.name) + "' data range [" +
                                         std::to_string(t.offset) + ", " + std::to_string(t.offset + t.nbytes) +
                                         ") exceeds the " + std::to_string(data_size) +
                                         "-byte data section (file size " + std::to_string(file.size()) + ")");
  }
  // Sized tensors must not share bytes.
  std::vector<const GgufTensorInfo*> sorted;
  for (const auto& t : h.tensors)
    if (t.nbytes) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i]->offset < sorted[i - 1]->offset + sorted[i - 1]->nbytes)
      fail(Status::invalid_argument, f + ": tensors '" + printable(sorted[i - 1]->name) + "' and '" +
                                         printable(sorted[i]->name) + "' overlap in the data section");
  return h;
}

// --- name mapping ------------------------------------------------------------------------------------------------

enum class Arch { llama, gemma3, qwen2, qwen3 };

// llama.cpp block tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.").
std::optional<std::string> map_block(Arch arch, const std::string& rest) {
  static const std::pair<const char*, const char*> common[] = {
      {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},      {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"}, {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  // The one name whose meaning depends on the architecture: Llama's only pre-MLP norm is HF's
  // post_attention_layernorm, while Gemma has a separate post-attention norm and a pre-feedforward one.
  static const std::pair<const char*, const char*> llama[] = {{"ffn_norm", "post_attention_layernorm"}};
  static const std::pair<const char*, const char*> gemma[] = {{"ffn_norm", "pre_feedforward_layernorm"},
                                                              {"post_attention_norm", "post_attention_layernorm"},
                                                              {"post_ffw_norm", "post_feedforward_layernorm"}};
  const auto dot = rest.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string base = rest.substr(0, dot), suffix = rest.substr(dot);  // ".weight" / ".bias"
  if (suffix != ".weight" && suffix != ".bias") return std::nullopt;
  for (auto& [g, hf] : common)
    if (base == g) return std::string(hf) + suffix;
  if (arch != Arch::gemma3) {  // Qwen2 / Qwen3 blocks are named as Llama's
    for (auto& [g, hf] : llama)
      if (base == g) return std::string(hf) + suffix;
  } else {
    for (auto& [g, hf] : gemma)
      if (base == g) return std::string(hf) + suffix;
  }
  return std::nullopt;
}

std::optional<std::string> map_name(Arch arch, const std::string& g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g.rfind("blk.", 0) == 0) {
    size_t i = 4, j = 4;
    while (j < g.size() && j - i < 9 && g[j] >= '0' && g[j] <= '9') ++j;
    if (j == i || j >= g.size() || g[j] != '.' || (g[i] == '0' && j - i > 1)) return std::nullopt;
    auto rest = map_block(arch, g.substr(j + 1));
    if (!rest) return std::nullopt;
    return "model.layers." + g.substr(i, j - i) + "." + *rest;
  }
  return std::nullopt;
}

// --- metadata helpers --------------------------------------------------------------------------------------------

class Meta {
 public:
  Meta(const json& m, std::string label, std::string arch) : m_(m), label_(std::move(label)), arch_(std::move(arch)) {}
  const json* find(const std::string& key) const {
    auto it = m_.find(key);
    return it == m_.end() ? nullptr : &*it;
  }
  // "{arch}.<suffix>"
  const json* arch(const std::string& suffix) const { return find(arch_ + "." + suffix); }
  std::optional<uint64_t> uint(const std::string& suffix, bool in_arch = true) const {
    const std::string key = in_arch ? arch_ + "." + suffix : suffix;
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (v->is_array()) {  // per-layer arrays are fine when uniform
      if (v->empty() || !std::all_of(v->begin(), v->end(), [&](const json& e) { return e == v->front(); }))
        fail(Status::unsupported, label_ + ": metadata '" + key + "' varies per layer (flashkit needs one value)");
      v = &v->front();
    }
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
      fail(Status::invalid_argument, label_ + ": metadata '" + key + "' is not a non-negative integer");
    return v->get<uint64_t>();
  }
  uint64_t need_uint(const std::string& suffix) const {
    auto v = uint(suffix);
    if (!v) fail(Status::invalid_argument, label_ + ": metadata '" + arch_ + "." + suffix + "' is missing");
    return *v;
  }
  std::optional<double> real(const std::string& suffix) const {
    const json* v = arch(suffix);
    if (!v) return std::nullopt;
    if (!v->is_number())
      fail(Status::invalid_argument, label_ + ": metadata '" + arch_ + "." + suffix + "' is not a number");
    return v->get<double>();
  }
  std::optional<std::string> string(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(Status::invalid_argument, label_ + ": metadata '" + key + "' is not a string");
    return v->get<std::string>();
  }

 private:
  const json& m_;
  std::string label_, arch_;
};

// GGUF stores most hyper-parameters as f32: print the shortest decimal that round-trips through f32 and read that
// back, so 1e-5 comes back as 1e-05 rather than 9.99999974738e-06 and compares equal to config.json.
double f32_clean(double v) {
  const float f = float(v);
  if (!std::isfinite(f) || double(f) != v) return v;  // an f64 value: keep as is
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// --- the store ---------------------------------------------------------------------------------------------------

class GgufStore : public detail::TensorStore {
 public:
  using TensorStore::TensorStore;
  GgufHeader header;
  std::string arch;
};

std::unique_ptr<WeightStore> open_bytes(std::shared_ptr<const Bytes> bytes) {
  const std::string& f = bytes->label();
  auto store = std::make_unique<GgufStore>(f);
  store->header = parse_header(*bytes);
  const GgufHeader& h = store->header;

  for (const auto& t : h.tensors)
    if (!weight_type_of(t.ggml_type))
      fail(Status::unsupported, f + ": tensor '" + printable(t.name) + "' has type " + ggml_type_name(t.ggml_type) +
                                    " (flashkit reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)");

  Meta meta(h.metadata, f, "");
  const auto arch_name = meta.string("general.architecture");
  if (!arch_name) fail(Status::invalid_argument, f + ": metadata 'general.architecture' is missing");
  Arch arch;
  if (*arch_name == "llama")
    arch = Arch::llama;
  else if (*arch_name == "gemma3")
    arch = Arch::gemma3;
  else if (*arch_name == "qwen2")
    arch = Arch::qwen2;
  else if (*arch_name == "qwen3")
    arch = Arch::qwen3;
  else
    fail(Status::unsupported, f + ": general.architecture '" + printable(*arch_name) +
                                  "' is not supported (flashkit maps llama, gemma3, qwen2 and qwen3)");
  store->arch = *arch_name;
  Meta am(h.metadata, f, *arch_name);

  const uint8_t* base = bytes->data() + h.data_offset;
  for (const auto& t : h.tensors) {
    WeightView v;
    auto hf = map_name(arch, t.name);
    v.name = hf ? *hf : t.name;  // unmapped tensors (rope_freqs.weight, ...) keep their GGUF name
    v.type = *weight_type_of(t.ggml_type);
    for (auto it = t.ne.rbegin(); it != t.ne.rend(); ++it) v.shape.push_back(int64_t(*it));
    v.data = base + t.offset;
    v.nbytes = size_t(t.nbytes);
    detail::ensure_aligned(*store, v);

    const bool is_q = t.name.size() > 4 && (t.name.find(".attn_q.") != std::string::npos);
    const bool is_k = t.name.size() > 4 && (t.name.find(".attn_k.") != std::string::npos);
    if (arch == Arch::llama && hf && (is_q || is_k)) {
      // Undo LlamaModel.permute: within each head llama.cpp stores row 2*i+j where HF has row j*half+i.
      const uint64_t heads = is_q ? am.need_uint("attention.head_count")
                                  : am.uint("attention.head_count_kv").value_or(am.need_uint("attention.head_count"));
      const uint64_t rows = v.shape.empty() ? 1 : uint64_t(v.shape[0]);
      if (heads == 0 || rows % heads != 0 || (rows / heads) % 2 != 0)
        fail(Status::invalid_argument, f + ": tensor '" + t.name + "' has " + std::to_string(rows) +
                                           " rows, not a whole number of even-sized heads for " +
                                           std::to_string(heads) + " heads");
      const uint64_t hd = rows / heads, half = hd / 2;
      const size_t row_bytes = rows ? v.nbytes / size_t(rows) : 0;
      auto* out = static_cast<uint8_t*>(store->own(v.nbytes));
      const auto* in = static_cast<const uint8_t*>(v.data);
      for (uint64_t hh = 0; hh < heads; ++hh)
        for (uint64_t j = 0; j < 2; ++j)
          for (uint64_t i = 0; i < half; ++i)
            std::memcpy(out + (hh * hd + j * half + i) * row_bytes, in + (hh * hd + 2 * i + j) * row_bytes, row_bytes);
      v.data = out;
    }
    if (arch == Arch::gemma3 && hf && t.name.size() >= 11 &&
        t.name.compare(t.name.size() - 11, 11, "norm.weight") == 0) {
      // Gemma3RMSNorm multiplies by (1 + w); llama.cpp stores 1 + w. Give back w, as f32.
      const int64_t n = v.numel();
      auto* out = static_cast<float*>(store->own(size_t(n) * 4));
      to_f32(v, out);
      for (int64_t i = 0; i < n; ++i) out[i] -= 1.0f;
      v.type = WeightType::f32;
      v.data = out;
      v.nbytes = size_t(n) * 4;
    }
    store->add(std::move(v), f);
  }
  store->keep(std::move(bytes));
  return store;
}

const GgufStore& as_gguf(const WeightStore& s) {
  auto* g = dynamic_cast<const GgufStore*>(&s);
  if (!g) fail(Status::invalid_argument, s.source() + ": not a GGUF checkpoint (no GGUF metadata)");
  return *g;
}

// llama3 RoPE keeps no metadata in GGUF: llama.cpp's converter bakes it into the rope_freqs tensor (one divisor per
// frequency). Recover the HF parameters by trying the values real checkpoints use and keeping the one that
// reproduces the tensor.
std::optional<json> fit_llama3_rope(const WeightView& freqs, double theta, uint64_t dim) {
  const int64_t n = freqs.numel();
  if (n <= 0 || uint64_t(n) * 2 != dim || n > (1 << 16)) return std::nullopt;
  std::vector<float> got(static_cast<size_t>(n));
  to_f32(freqs, got.data());
  const double factor = *std::max_element(got.begin(), got.end());
  for (double orig : {8192.0, 4096.0, 2048.0, 16384.0, 32768.0, 65536.0, 131072.0})
    for (double lo : {1.0, 0.5, 2.0})
      for (double hi : {4.0, 2.0, 8.0, 3.0}) {
        if (lo == hi) continue;
        const double lw = orig / lo, hw = orig / hi;
        bool ok = true;
        for (int64_t i = 0; i < n && ok; ++i) {
          const double freq = 1.0 / std::pow(theta, double(2 * i) / double(dim));
          const double wl = 2 * M_PI / freq;
          double want;
          if (wl < hw)
            want = 1;
          else if (wl > lw)
            want = factor;
          else {
            const double s = (orig / wl - lo) / (hi - lo);
            want = 1 / ((1 - s) / factor + s);
          }
          ok = std::fabs(want - got[size_t(i)]) <= 1e-4 * std::max(1.0, want);
        }
        if (ok)
          return json{{"rope_type", "llama3"},
                      {"factor", f32_clean(factor)},
                      {"low_freq_factor", lo},
                      {"high_freq_factor", hi},
                      {"original_max_position_embeddings", uint64_t(orig)}};
      }
  return std::nullopt;
}

}  // namespace

std::string ggml_type_name(uint32_t t) {
  static const char* names[] = {"F32",     "F16",     "Q4_0",    "Q4_1",  "type 4",  "type 5",  "Q5_0",    "Q5_1",
                                "Q8_0",    "Q8_1",    "Q2_K",    "Q3_K",  "Q4_K",    "Q5_K",    "Q6_K",    "Q8_K",
                                "IQ2_XXS", "IQ2_XS",  "IQ3_XXS", "IQ1_S", "IQ4_NL",  "IQ3_S",   "IQ2_S",   "IQ4_XS",
                                "I8",      "I16",     "I32",     "I64",   "F64",     "IQ1_M",   "BF16",    "type 31",
                                "type 32", "type 33", "TQ1_0",   "TQ2_0", "type 36", "type 37", "type 38", "MXFP4"};
  if (t < sizeof names / sizeof names[0]) return names[t];
  return "type " + std::to_string(t);
}

GgufHeader read_gguf_header(const void* data, size_t size, const std::string& label) {
  return parse_header(*Bytes::borrow(data, size, label));
}

GgufHeader read_gguf_header(const std::filesystem::path& file) { return parse_header(*Bytes::map_file(file)); }

std::unique_ptr<WeightStore> open_gguf(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    fail(Status::invalid_argument, file.string() + ": no such file (expected a .gguf file)");
  return open_bytes(Bytes::map_file(file));
}

std::unique_ptr<WeightStore> open_gguf_memory(const void* data, size_t size, const std::string& label) {
  return open_bytes(Bytes::borrow(data, size, label));
}

const json& gguf_metadata(const WeightStore& store) { return as_gguf(store).header.metadata; }

json gguf_hf_config(const WeightStore& store) {
  const GgufStore& g = as_gguf(store);
  const std::string& f = g.source();
  Meta m(g.header.metadata, f, g.arch);
  const bool gemma = g.arch == "gemma3";
  json c = json::object();
  if (g.arch == "qwen2" || g.arch == "qwen3") {  // llama.cpp keeps Qwen's q/k rows in HF order (no permutation)
    c["architectures"] = json::array({g.arch == "qwen2" ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM"});
    c["model_type"] = g.arch;
  } else {
    c["architectures"] = json::array({gemma ? "Gemma3ForCausalLM" : "LlamaForCausalLM"});
    c["model_type"] = gemma ? "gemma3_text" : "llama";
  }
  const uint64_t hidden = m.need_uint("embedding_length"), heads = m.need_uint("attention.head_count");
  if (heads == 0) fail(Status::invalid_argument, f + ": metadata '" + g.arch + ".attention.head_count' is 0");
  const uint64_t layers = m.need_uint("block_count");
  if (layers > (1u << 20)) fail(Status::invalid_argument, f + ": block_count " + std::to_string(layers) + " is absurd");
  c["hidden_size"] = hidden;
  c["intermediate_size"] = m.need_uint("feed_forward_length");
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = m.uint("attention.head_count_kv").value_or(heads);
  const uint64_t head_dim = m.uint("attention.key_length").value_or(hidden / heads);
  c["head_dim"] = head_dim;
  c["rms_norm_eps"] = f32_clean(m.real("attention.layer_norm_rms_epsilon").value_or(gemma ? 1e-6 : 1e-5));
  if (auto ctx = m.uint("context_length")) c["max_position_embeddings"] = *ctx;
  if (const WeightView* e = g.find("model.embed_tokens.weight"); e && !e->shape.empty())
    c["vocab_size"] = e->shape[0];
  else if (auto vs = m.uint("vocab_size"))
    c["vocab_size"] = *vs;
  for (auto [gk, hk] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                        std::pair{"tokenizer.ggml.eos_token_id", "eos_token_id"},
                        std::pair{"tokenizer.ggml.padding_token_id", "pad_token_id"}}) {
    auto v = m.uint(gk, false);
    c[hk] = v ? json(*v) : json(nullptr);
  }
  // HF's dtype names the checkpoint's float type; a quantized embedding has none, so the key is left out.
  if (const WeightView* e = g.find("model.embed_tokens.weight"); e && !is_quantized(e->type))
    c["dtype"] = e->type == WeightType::f32 ? "float32" : e->type == WeightType::f16 ? "float16" : "bfloat16";
  c["tie_word_embeddings"] = g.find("lm_head.weight") == nullptr;
  c["attention_bias"] = g.find("model.layers.0.self_attn.q_proj.bias") != nullptr;

  const double theta = f32_clean(m.real("rope.freq_base").value_or(gemma ? 1e6 : 1e4));
  json scaling = nullptr;  // HF rope_scaling minus rope_theta
  const auto stype = m.string(g.arch + ".rope.scaling.type");
  const auto sfactor = m.real("rope.scaling.factor");
  if (stype && *stype != "none" && sfactor) {
    if (*stype == "linear") {
      scaling = {{"rope_type", "linear"}, {"factor", f32_clean(*sfactor)}};
    } else if (*stype == "yarn") {
      scaling = {{"rope_type", "yarn"}, {"factor", f32_clean(*sfactor)}};
      if (auto o = m.uint("rope.scaling.original_context_length")) scaling["original_max_position_embeddings"] = *o;
    } else {
      fail(Status::unsupported,
           f + ": rope scaling type '" + printable(*stype) + "' (flashkit maps linear, yarn, llama3)");
    }
  }
  if (const WeightView* rf = g.find("rope_freqs.weight"); rf && !gemma) {
    auto fit = fit_llama3_rope(*rf, theta, m.uint("rope.dimension_count").value_or(head_dim));
    if (!fit)
      fail(Status::unsupported, f + ": rope_freqs.weight does not match llama3 RoPE scaling for any usual parameters");
    scaling = *fit;
  }

  c["rope_theta"] = theta;
  c["rope_scaling"] = scaling;
  if (!gemma) {
    json rp = scaling.is_null() ? json{{"rope_type", "default"}} : scaling;
    rp["rope_theta"] = theta;
    c["rope_parameters"] = rp;
    c["hidden_act"] = "silu";
    c["mlp_bias"] = false;
    return c;
  }

  // Gemma 3. llama.cpp hard-codes what its GGUFs omit (local RoPE base 10000, every 6th layer global, query scale
  // from the model size); flashkit's converter writes keys for them, read here when present.
  const double local_theta = f32_clean(m.real("rope.freq_base_swa").value_or(10000.0));
  json full = scaling.is_null() ? json{{"rope_type", "default"}} : scaling;
  full["rope_theta"] = theta;
  c["rope_parameters"] = {{"full_attention", full},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", local_theta}}}};
  c["rope_local_base_freq"] = local_theta;
  c["hidden_activation"] = "gelu_pytorch_tanh";
  if (auto sw = m.uint("attention.sliding_window")) c["sliding_window"] = *sw;
  json types = json::array();
  const json* pat = m.arch("attention.sliding_window_pattern");
  if (pat && pat->is_array()) {
    if (pat->size() != layers)
      fail(Status::invalid_argument, f + ": gemma3.attention.sliding_window_pattern has " +
                                         std::to_string(pat->size()) + " entries for " + std::to_string(layers) +
                                         " layers");
    for (const json& e : *pat) {
      if (!e.is_boolean())
        fail(Status::invalid_argument, f + ": gemma3.attention.sliding_window_pattern entries must be bools");
      types.push_back(e.get<bool>() ? "sliding_attention" : "full_attention");
    }
  } else {
    const uint64_t period = pat ? m.need_uint("attention.sliding_window_pattern") : 6;
    if (period == 0) fail(Status::invalid_argument, f + ": gemma3.attention.sliding_window_pattern is 0");
    for (uint64_t i = 0; i < layers; ++i) types.push_back((i + 1) % period ? "sliding_attention" : "full_attention");
    c["sliding_window_pattern"] = period;
  }
  c["layer_types"] = types;
  if (auto s = m.real("attention.scale"); s && *s > 0) {
    double q = 1.0 / (*s * *s);
    if (std::fabs(q - std::round(q)) < 1e-3 * q) q = std::round(q);
    c["query_pre_attn_scalar"] = q;
  } else {
    c["query_pre_attn_scalar"] = layers == 62 ? hidden / heads : head_dim;  // llama.cpp: the 27B model differs
  }
  auto cap = [&](const char* key) {
    auto v = m.real(key);
    return v ? json(f32_clean(*v)) : json(nullptr);
  };
  c["final_logit_softcapping"] = cap("final_logit_softcapping");
  c["attn_logit_softcapping"] = cap("attn_logit_softcapping");
  return c;
}

json gguf_tokenizer_json(const WeightStore& store) {
  const GgufStore& g = as_gguf(store);
  const json& md = g.header.metadata;
  const std::string& f = g.source();
  auto tok = md.find("tokenizer.ggml.tokens");
  if (tok == md.end() || !tok->is_array())
    fail(Status::invalid_argument, f + ": metadata 'tokenizer.ggml.tokens' is missing (no vocabulary in this GGUF)");
  const auto mit = md.find("tokenizer.ggml.model");
  const std::string model = mit != md.end() && mit->is_string() ? mit->get<std::string>() : "llama";
  // Optional per-token arrays: any other kind of value is a malformed file, not something to index into.
  auto optional_array = [&](const char* key) -> const json* {
    auto it = md.find(key);
    if (it == md.end()) return nullptr;
    if (!it->is_array())
      fail(Status::invalid_argument, f + ": metadata '" + key + "' is " + std::string(it->type_name()) +
                                         ", expected an array with one entry per token");
    return &*it;
  };
  const json* scores = optional_array("tokenizer.ggml.scores");
  const json* types = optional_array("tokenizer.ggml.token_type");
  json out = json::object();
  json added = json::array();
  const bool bpe = model == "gpt2";
  json vocab = bpe ? json::object() : json::array();
  for (size_t i = 0; i < tok->size(); ++i) {
    const json& t = (*tok)[i];
    if (!t.is_string())
      fail(Status::invalid_argument, f + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] is not a string");
    const double score = scores && i < scores->size() && (*scores)[i].is_number() ? (*scores)[i].get<double>() : 0.0;
    if (bpe)
      vocab[t.get<std::string>()] = i;
    else
      vocab.push_back(json::array({t, score}));
    // llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte
    const int64_t ty = types && i < types->size() && (*types)[i].is_number_integer() ? (*types)[i].get<int64_t>() : 1;
    if (ty == 3 || ty == 4) added.push_back({{"id", i}, {"content", t}, {"special", ty == 3}});
  }
  out["model"] = {{"type", bpe ? "BPE" : "Unigram"}, {"vocab", std::move(vocab)}};
  if (auto mg = md.find("tokenizer.ggml.merges"); mg != md.end()) {
    if (!mg->is_array())
      fail(Status::invalid_argument, f + ": metadata 'tokenizer.ggml.merges' is " + std::string(mg->type_name()) +
                                         ", expected an array of strings");
    out["model"]["merges"] = *mg;
  }
  out["added_tokens"] = std::move(added);
  json gg = json::object();
  for (auto& [k, v] : md.items())
    if (k.rfind("tokenizer.", 0) == 0 && k != "tokenizer.ggml.tokens" && k != "tokenizer.ggml.scores" &&
        k != "tokenizer.ggml.merges")
      gg[k.substr(10)] = v;
  out["gguf"] = std::move(gg);  // ggml.model, ggml.pre, ids, add_bos_token, token_type, chat_template, ...
  return out;
}

Checkpoint open_checkpoint(const std::filesystem::path& path) {
  Checkpoint ck;
  if (path.extension() == ".gguf") {
    ck.weights = open_gguf(path);
    ck.config = gguf_hf_config(*ck.weights);
    return ck;
  }
  ck.weights = open_safetensors(path);
  std::error_code ec;
  const auto dir = std::filesystem::is_directory(path, ec) ? path : path.parent_path();
  const auto cfg = dir / "config.json";
  ck.config = json_io::read_json_file(cfg);
  if (!ck.config.is_object()) fail(Status::invalid_argument, cfg.string() + ": expected a JSON object");
  return ck;
}

}  // namespace flashkit::model
