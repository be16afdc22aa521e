// Format-independent parts of the weight interface: type names, element counts, f32 conversion, and the
// memory-mapped file and name table both readers build on.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/detail.hpp"
#include "model/quant.hpp"

namespace flashkit::model {

const char* weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::f32: return "f32";
    case WeightType::f16: return "f16";
    case WeightType::bf16: return "bf16";
    case WeightType::q8_0: return "q8_0";
    case WeightType::q4_0: return "q4_0";
    case WeightType::q4_k: return "q4_k";
    case WeightType::q5_k: return "q5_k";
    case WeightType::q6_k: return "q6_k";
  }
  return "unknown";
}

int64_t WeightView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // the readers reject shapes whose product overflows
  return n;
}

const WeightView& WeightStore::get(std::string_view name) const {
  if (const WeightView* w = find(name)) return *w;
  fail(Status::invalid_argument, source() + ": no tensor named '" + detail::printable(name) + "' in the checkpoint");
}

void to_f32(const WeightView& w, float* out) {
  const int64_t n = w.numel();
  uint64_t need = 0;
  if (!detail::storage_bytes(w.type, uint64_t(n), &need) || need > w.nbytes)
    fail(Status::invalid_argument, "to_f32: tensor '" + w.name + "' holds " + std::to_string(w.nbytes) +
                                       " bytes, fewer than its shape " + detail::shape_str(w.shape) + " of " +
                                       weight_type_name(w.type) + " needs");
  if (n == 0) return;  // empty tensors: `out` and `data` may be null, and memcpy must not see null
  const auto* src = static_cast<const uint8_t*>(w.data);
  // memcpy per element: views into a file are not guaranteed aligned for every caller's build of the store.
  switch (w.type) {
    case WeightType::f32: std::memcpy(out, src, size_t(n) * 4); break;
    case WeightType::f16:
#pragma omp parallel for if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      break;
    case WeightType::bf16:
#pragma omp parallel for if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      break;
    case WeightType::q8_0:
    case WeightType::q4_0:
    case WeightType::q4_k:
    case WeightType::q5_k:
    case WeightType::q6_k: {
      const QuantBlock qb = quant_block(w.type);
      const int64_t blocks = n / qb.values;
#pragma omp parallel for if (blocks > 2048)
      for (int64_t b = 0; b < blocks; ++b) dequantize_blocks(w.type, src + qb.bytes * b, 1, out + qb.values * b);
      break;
    }
  }
}

void to_bf16(const WeightView& w, uint16_t* out) {
  const int64_t n = w.numel();
  if (n == 0) return;
  if (w.type == WeightType::bf16) {
    uint64_t need = 0;
    if (!detail::storage_bytes(w.type, uint64_t(n), &need) || need > w.nbytes)
      fail(Status::invalid_argument, "to_bf16: tensor '" + w.name + "' holds fewer bytes than its shape needs");
    std::memcpy(out, w.data, size_t(n) * 2);
    return;
  }
  std::vector<float> tmp(static_cast<size_t>(n));
  to_f32(w, tmp.data());
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(tmp[size_t(i)]);
}

namespace {
// First index in [0, n) whose bits have the exponent field all ones (inf or NaN), or -1. Blocks of 4096 are
// reduced without branches (vectorized by the compiler), in parallel for big tensors; only a block that has
// one is searched again.
template <class Bits>
int64_t first_all_ones_exponent(const uint8_t* src, int64_t n, Bits mask) {
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  int64_t first = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(min : first) if (blocks > 64)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    Bits bits[kBlock];
    std::memcpy(bits, src + lo * int64_t(sizeof(Bits)), size_t(hi - lo) * sizeof(Bits));  // unaligned views
    unsigned any = 0;
    for (int64_t i = 0; i < hi - lo; ++i) any |= unsigned((bits[i] & mask) == mask);
    if (!any) continue;
    for (int64_t i = 0; i < hi - lo; ++i)
      if ((bits[i] & mask) == mask) {
        first = std::min(first, lo + i);
        break;
      }
  }
  return first == INT64_MAX ? -1 : first;
}
}  // namespace

int64_t first_non_finite(const WeightView& w) {
  const int64_t n = w.numel();
  uint64_t need = 0;
  if (n <= 0 || !detail::storage_bytes(w.type, uint64_t(n), &need) || need > w.nbytes) return -1;
  const auto* src = static_cast<const uint8_t*>(w.data);
  switch (w.type) {
    case WeightType::f32: return first_all_ones_exponent<uint32_t>(src, n, 0x7f800000u);
    case WeightType::bf16: return first_all_ones_exponent<uint16_t>(src, n, uint16_t(0x7f80));
    case WeightType::f16: return first_all_ones_exponent<uint16_t>(src, n, uint16_t(0x7c00));
    case WeightType::q8_0:
    case WeightType::q4_0:
    case WeightType::q4_k:
    case WeightType::q5_k:
    case WeightType::q6_k: {
      // The quants are small integers: only a non-finite f16 scale makes a value non-finite, so expanding each
      // block (into L1) finds exactly the first one.
      const QuantBlock qb = quant_block(w.type);
      float buf[256];
      for (int64_t b = 0; b < n / qb.values; ++b) {
        dequantize_blocks(w.type, src + qb.bytes * b, 1, buf);
        for (int64_t j = 0; j < qb.values; ++j)
          if (!std::isfinite(buf[j])) return qb.values * b + j;
      }
      return -1;
    }
  }
  return -1;
}

void check_finite(const WeightView& w, const std::string& source) {
  const int64_t i = first_non_finite(w);
  if (i < 0) return;
  float v = 0;
  if (is_quantized(w.type)) {
    // Report the block's non-finite f16 scale (d, or Q4_K/Q5_K's dmin; Q6_K keeps d last), not scale * quant.
    const QuantBlock qb = quant_block(w.type);
    const uint8_t* blk = static_cast<const uint8_t*>(w.data) + qb.bytes * (i / qb.values);
    const bool two = w.type == WeightType::q4_k || w.type == WeightType::q5_k;
    for (size_t at : {w.type == WeightType::q6_k ? size_t(208) : size_t(0), size_t(2)}) {
      uint16_t h;
      std::memcpy(&h, blk + at, 2);
      v = f16_to_f32(h);
      if (!std::isfinite(v) || !two) break;
    }
  } else {
    WeightView one = w;
    one.shape = {1};
    const size_t es = detail::element_size(w.type);
    one.data = static_cast<const uint8_t*>(w.data) + size_t(i) * es;
    one.nbytes = es;
    to_f32(one, &v);
  }
  std::string at = std::to_string(i);
  if (w.shape.size() == 2) at += " ([" + std::to_string(i / w.shape[1]) + ", " + std::to_string(i % w.shape[1]) + "])";
  fail(Status::invalid_argument, source + ": tensor '" + detail::printable(w.name) + "' holds " +
                                     (std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf") + " at element " + at +
                                     (is_quantized(w.type) ? " (its block scale)" : "") +
                                     "; every weight must be finite (the file is corrupt or was saved after a "
                                     "diverged update)");
}

namespace detail {

std::shared_ptr<const Bytes> Bytes::map_file(const std::filesystem::path& path) {
  const std::string p = path.string();
  // O_NONBLOCK so a FIFO named like a checkpoint cannot hang open(); we reject non-regular files below anyway.
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(Status::invalid_argument, p + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(Status::invalid_argument, p + ": not a regular file");
  }
  std::shared_ptr<Bytes> b(new Bytes());
  b->label_ = p;
  b->size_ = size_t(st.st_size);
  if (b->size_ > 0) {
    void* m = ::mmap(nullptr, b->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(Status::invalid_argument,
           p + ": cannot mmap " + std::to_string(b->size_) + " bytes (" + std::strerror(e) + ")");
    }
    b->data_ = static_cast<const uint8_t*>(m);
    b->mapped_ = true;
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return b;
}

std::shared_ptr<const Bytes> Bytes::borrow(const void* data, size_t size, std::string label) {
  std::shared_ptr<Bytes> b(new Bytes());
  b->data_ = static_cast<const uint8_t*>(data);
  b->size_ = data ? size : 0;
  b->label_ = std::move(label);
  return b;
}

Bytes::~Bytes() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

const WeightView* TensorStore::find(std::string_view name) const {
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

WeightView* TensorStore::find_mutable(std::string_view name) {
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(views_.size());
  for (const auto& kv : views_) out.push_back(kv.first);
  return out;
}

void* TensorStore::own(size_t nbytes) {
  owned_.push_back(std::make_unique<uint64_t[]>((nbytes + 7) / 8 + 1));
  return owned_.back().get();
}

void TensorStore::add(WeightView v, const std::string& where) {
  std::string name = v.name;
  if (!views_.emplace(name, std::move(v)).second)
    fail(Status::invalid_argument, where + ": tensor '" + printable(name) + "' is listed more than once");
}

size_t element_size(WeightType t) {
  switch (t) {
    case WeightType::f32: return 4;
    case WeightType::f16:
    case WeightType::bf16: return 2;
    default: return 1;  // quantized: byte-granular blocks; see storage_bytes
  }
  return 1;
}

bool storage_bytes(WeightType t, uint64_t numel, uint64_t* out) {
  if (is_quantized(t)) {
    const QuantBlock qb = quant_block(t);
    if (numel % uint64_t(qb.values) != 0) return false;
    return mul_ok(numel / uint64_t(qb.values), uint64_t(qb.bytes), out);
  }
  return mul_ok(numel, element_size(t), out);
}

void ensure_aligned(TensorStore& store, WeightView& v) {
  const size_t a = is_quantized(v.type) ? 2 : element_size(v.type);
  if (reinterpret_cast<uintptr_t>(v.data) % a == 0) return;
  void* copy = store.own(v.nbytes);
  if (v.nbytes) std::memcpy(copy, v.data, v.nbytes);
  v.data = copy;
}

std::string printable(std::string_view s) {
  std::string o;
  for (char c : s.substr(0, 100)) o += (c >= 32 && c < 127) ? c : '?';
  return s.size() > 100 ? o + "..." : o;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace detail
}  // namespace flashkit::model
