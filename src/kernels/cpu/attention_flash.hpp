// CPU flash attention: block sizes (shared by the kernels and the cost model) and per-ISA entry points.
#pragma once
#include <cstdint>

#include "kernels/attention_args.hpp"

namespace flashkit::kernels {

struct FlashBlocks {
  int64_t bq, bk;  // query rows and keys per tile
};

// Q, O, K^T, V and S tiles of a forward work item take (2 bq d + 2 bk d + bq bk) * 4 bytes:
// 80 KiB at d=64, 288 KiB at d=256 with bq=32 -- inside a 512 KiB-1 MiB L2 per core.
inline FlashBlocks flash_cpu_blocks(int64_t head_dim) { return {head_dim <= 128 ? 128 : 64, 64}; }

// The forward packs K^T and V into contiguous f32 tiles once when each key tile is used by more than two
// query tiles (GQA group x query tiles); decode-shaped calls load key tiles directly instead.
inline bool flash_cpu_packs_kv(const AttentionShape& s) {
  const int64_t bq = flash_cpu_blocks(s.head_dim).bq;
  return s.group() * ((s.max_seqlen_q + bq - 1) / bq) > 2;
}

// Decode-shaped calls (a few query rows per KV head) take the split-KV path: work items over chunks of
// keys with all heads, then an LSE-weighted combine.
inline bool flash_cpu_uses_decode(const AttentionShape& s) {
  return s.max_seqlen_q <= 16 && s.max_seqlen_q * s.group() <= 64;
}

#define FK_DECLARE_FLASH_ISA(isa)                          \
  namespace isa {                                          \
  void flash_forward(const AttentionFwdArgs& a);           \
  void flash_decode(const AttentionFwdArgs& a);            \
  void flash_backward(const AttentionBwdArgs& g);          \
  }
FK_DECLARE_FLASH_ISA(scalar)
FK_DECLARE_FLASH_ISA(avx2)
FK_DECLARE_FLASH_ISA(avx512)
#undef FK_DECLARE_FLASH_ISA

}  // namespace flashkit::kernels
