// The KV block allocator of the server: fixed-size blocks with reference counts, and the prefix cache over them.
//
// Blocks. The pool has num_blocks blocks of block_size positions (the PagedRunner's per-layer pools are indexed by
// the same ids). A block is free, referenced (ref > 0: in some sequence's block table; a shared prefix block has one
// reference per sequence), or cached and unreferenced (kept for reuse, evictable, in LRU order). allocate() takes a
// free block, else evicts the least recently used cached one.
//
// Prefix cache. A full block is published under a chain key: H(salt, key of the previous block of the sequence (0 for
// the first), the block's tokens). The key thus stands for every token before the block as well, so a lookup walks a
// prompt block by block and stops at the first miss; any request sharing a prefix reuses it. The salt is a hash of
// the model identity (engine/paged.hpp: checkpoint files, config, dtypes) and the block size: everything besides the
// tokens that decides a block's keys and values, so a block computed under another model can never be returned.
// Each entry also keeps its tokens and its parent key, and a lookup compares them, so a 64-bit hash collision cannot
// return a wrong block either. reset_cache() forgets every entry (POST /v1/cache/reset); set_salt() with a new value
// does too.
// Not thread-safe: owned by the scheduler (the engine thread).
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace flashkit::serve {

struct BlockPoolStats {
  int64_t total = 0, free = 0, used = 0, cached = 0;  // free includes cached-unreferenced (evictable) blocks
  int64_t hit_blocks = 0, miss_blocks = 0, evictions = 0, resets = 0;
};

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, int64_t block_size, uint64_t salt);

  int64_t num_blocks() const { return int64_t(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t available() const { return int64_t(free_.size() + lru_.size()); }  // allocatable now
  int32_t allocate();          // a block with ref 1; -1 when nothing is free or evictable
  void retain(int32_t block);  // ref + 1
  void release(int32_t block); // ref - 1; at 0 it is free again, or evictable if cached

  // The cached blocks for the first whole blocks of `tokens` (at most max_blocks), retained for the caller, and their
  // keys; the walk stops at the first block not in the cache. Counts hits (blocks found) and misses (the rest).
  std::vector<int32_t> match(std::span<const int32_t> tokens, int64_t max_blocks, std::vector<uint64_t>* keys);
  // Publishes a full block (tokens.size() == block_size) that follows the block with key `parent` (0: the first
  // block); returns its key. When another block already holds that key (the same prefix computed twice) this one
  // stays private and is freed normally.
  uint64_t publish(int32_t block, uint64_t parent, std::span<const int32_t> tokens);
  uint64_t chain_key(uint64_t parent, std::span<const int32_t> tokens) const;

  void reset_cache();
  void set_salt(uint64_t salt);  // a different value empties the cache
  uint64_t salt() const { return salt_; }
  BlockPoolStats stats() const;

 private:
  struct Block {
    int32_t ref = 0;
    bool cached = false;
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;   // cached blocks: their tokens (checked on lookup)
    std::list<int32_t>::iterator lru;  // valid when cached && ref == 0
  };
  void uncache(int32_t b);

  int64_t block_size_;
  uint64_t salt_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;   // neither referenced nor cached
  std::list<int32_t> lru_;      // cached and unreferenced, least recently used first
  std::unordered_map<uint64_t, int32_t> cache_;
  int64_t hits_ = 0, misses_ = 0, evictions_ = 0, resets_ = 0;
};

// 64-bit hash of a byte string (the model identity -> salt).
uint64_t hash_bytes(const void* data, size_t n, uint64_t seed = 0);

}  // namespace flashkit::serve
