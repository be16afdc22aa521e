// Training data: token files, the batch sampler, `prepare-data` (text -> tokens with a validation split) and the
// synthetic task generators.
//
// Token file (.bin): a 32-byte header -- "FKTOKENS", u32 version (1), u32 bytes per token (2 or 4), u64 token count,
// u32 vocabulary size, u32 reserved -- then the ids, little-endian. Memory-mapped for training.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "flashkit/train.hpp"

namespace flashkit::train {

class TokenFile {
 public:
  // Throws invalid_argument naming the file for a missing, truncated or malformed file.
  explicit TokenFile(const std::filesystem::path& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  int64_t size() const { return n_; }
  int64_t vocab_size() const { return vocab_; }
  int bytes_per_token() const { return bpt_; }
  int32_t at(int64_t i) const {
    if (bpt_ == 2) return int32_t(static_cast<const uint16_t*>(ids_)[i]);
    return int32_t(static_cast<const uint32_t*>(ids_)[i]);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* ids_ = nullptr;
  int64_t n_ = 0, vocab_ = 0;
  int bpt_ = 2;
};

// Writes ids as a token file (atomically: temp file, fsync, rename). uint16 when vocab_size <= 65536.
void write_token_file(const std::filesystem::path& path, const std::vector<int32_t>& ids, int64_t vocab_size);

// Training windows: micro-batch (step, micro) is a pure function of the seed -- sequence b starts at
// hash(seed, step, micro, b) mod (tokens - seq) -- so the data order needs no state beyond the step counter.
// ids[b * seq + t] = tok[start + t], targets = tok[start + t + 1].
void sample_batch(const TokenFile& f, uint64_t seed, int64_t step, int64_t micro, int64_t batch, int64_t seq,
                  int32_t* ids, int32_t* targets);
// Validation windows: consecutive non-overlapping windows from the start of the file (window k of the
// evaluation), wrapping around when the file is short.
void eval_batch(const TokenFile& f, int64_t index, int64_t batch, int64_t seq, int32_t* ids, int32_t* targets);

}  // namespace flashkit::train
