// See block_pool.hpp.
#include "serve/block_pool.hpp"

#include <algorithm>
#include <string>

#include "flashkit/error.hpp"

namespace flashkit::serve {

namespace {
inline uint64_t mix(uint64_t x) {  // splitmix64's finalizer: every input bit reaches every output bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}
}  // namespace

uint64_t hash_bytes(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = mix(seed ^ 0x9e3779b97f4a7c15ull ^ n);
  for (size_t i = 0; i < n; ++i) h = mix(h ^ (uint64_t(p[i]) + 0x100 * (i & 7)));
  return h;
}

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size, uint64_t salt) : block_size_(block_size), salt_(salt) {
  if (num_blocks < 1 || num_blocks > (int64_t(1) << 30))
    fail(Status::invalid_argument, "block pool: num_blocks must be in [1, 2^30], got " + std::to_string(num_blocks));
  if (block_size < 1) fail(Status::invalid_argument, "block pool: block_size must be >= 1, got " + std::to_string(block_size));
  blocks_.resize(size_t(num_blocks));
  free_.reserve(size_t(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 handed out first
}

int32_t BlockPool::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    uncache(b);  // also unlinks it from the LRU list
    ++evictions_;
  } else {
    return -1;
  }
  blocks_[size_t(b)].ref = 1;
  return b;
}

void BlockPool::retain(int32_t b) {
  Block& k = blocks_[size_t(b)];
  if (k.ref == 0 && k.cached) lru_.erase(k.lru);
  ++k.ref;
}

void BlockPool::release(int32_t b) {
  Block& k = blocks_[size_t(b)];
  if (k.ref <= 0) fail(Status::internal, "block pool: release of unreferenced block " + std::to_string(b));
  if (--k.ref > 0) return;
  if (k.cached) k.lru = lru_.insert(lru_.end(), b);
  else free_.push_back(b);
}

void BlockPool::uncache(int32_t b) {
  Block& k = blocks_[size_t(b)];
  if (!k.cached) return;
  if (k.ref == 0) lru_.erase(k.lru);
  cache_.erase(k.key);
  k.cached = false;
  k.tokens.clear();
}

uint64_t BlockPool::chain_key(uint64_t parent, std::span<const int32_t> tokens) const {
  uint64_t h = mix(salt_ ^ mix(parent + 0x632be59bd9b4e019ull));
  for (int32_t t : tokens) h = mix(h ^ (uint64_t(uint32_t(t)) | (uint64_t(0xa5a5) << 40)));
  return h | 1;  // never 0 (0 is "no parent")
}

std::vector<int32_t> BlockPool::match(std::span<const int32_t> tokens, int64_t max_blocks, std::vector<uint64_t>* keys) {
  std::vector<int32_t> out;
  const int64_t n = std::min<int64_t>(max_blocks, int64_t(tokens.size()) / block_size_);
  uint64_t parent = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto blk = tokens.subspan(size_t(i * block_size_), size_t(block_size_));
    const uint64_t key = chain_key(parent, blk);
    auto it = cache_.find(key);
    if (it == cache_.end()) break;
    const Block& k = blocks_[size_t(it->second)];
    if (k.parent != parent || !std::equal(blk.begin(), blk.end(), k.tokens.begin(), k.tokens.end())) break;
    retain(it->second);
    out.push_back(it->second);
    if (keys) keys->push_back(key);
    parent = key;
  }
  hits_ += int64_t(out.size());
  misses_ += n - int64_t(out.size());
  return out;
}

uint64_t BlockPool::publish(int32_t b, uint64_t parent, std::span<const int32_t> tokens) {
  if (int64_t(tokens.size()) != block_size_) fail(Status::internal, "block pool: publish of a partial block");
  const uint64_t key = chain_key(parent, tokens);
  Block& k = blocks_[size_t(b)];
  if (k.cached || cache_.count(key)) return key;
  k.cached = true;
  k.key = key;
  k.parent = parent;
  k.tokens.assign(tokens.begin(), tokens.end());
  cache_.emplace(key, b);
  if (k.ref == 0) k.lru = lru_.insert(lru_.end(), b);
  return key;
}

void BlockPool::reset_cache() {
  for (size_t b = 0; b < blocks_.size(); ++b) {
    Block& k = blocks_[b];
    if (!k.cached) continue;
    const bool idle = k.ref == 0;
    uncache(int32_t(b));
    if (idle) free_.push_back(int32_t(b));
  }
  ++resets_;
}

void BlockPool::set_salt(uint64_t salt) {
  if (salt == salt_) return;
  reset_cache();
  salt_ = salt;
}

BlockPoolStats BlockPool::stats() const {
  BlockPoolStats s;
  s.total = num_blocks();
  s.free = available();
  s.used = s.total - s.free;
  s.cached = int64_t(cache_.size());
  s.hit_blocks = hits_;
  s.miss_blocks = misses_;
  s.evictions = evictions_;
  s.resets = resets_;
  return s;
}

}  // namespace flashkit::serve
