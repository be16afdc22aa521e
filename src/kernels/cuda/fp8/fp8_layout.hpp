// Register and memory layouts of the fp8 (e4m3) Hopper forward (flash_fwd_fp8_sm90.cuh), as constexpr functions
// shared by the kernels and their CPU unit test (tests/attention/test_attention_fp8.cpp).
//
// P V takes P from registers as wgmma's 8-bit A fragment (m64k32): per warp's 16 rows, thread (g = lane / 4,
// t = lane % 4) holds 4 registers of 4 bytes, register r byte b being row g + 8 (r & 1), logical k
// 16 (r >> 1) + 4 t + b (the mma.m16n8k32 8-bit A layout). The f32 accumulator of S = Q K^T gives the same thread,
// in the 32-key chunk c of a tile, n8 tiles 4c + j (j = 0..3) with element e = row g + 8 (e >> 1), key
// 8 j + 2 t + (e & 1). Packing register r byte b from accumulator tile j = fp8_p_tile(r, b), element
// e = fp8_p_elem(r, b) puts the right rows in place and physical key fp8_pv_key_of_slot(logical k) at logical k:
// a fixed permutation inside each 32-key chunk, with no shuffles. The V^T prep kernel stores V's keys in that same
// order, so the product sums matching keys.
#pragma once

namespace flashkit::cuda {

// Physical key (offset in its 32-key chunk) stored at logical k-slot `k` of the P fragment and of V^T's columns.
constexpr int fp8_pv_key_of_slot(int k) {
  const int half = k >> 4, t = (k & 15) >> 2, b = k & 3;
  return 16 * half + 2 * t + (b & 1) + 8 * (b >> 1);
}
// The key of V stored at V^T column `slot` (keys permuted inside each 32-key chunk).
constexpr long long fp8_vt_source_key(long long slot) { return (slot & ~31LL) + fp8_pv_key_of_slot(int(slot & 31)); }
// The accumulator n8 tile (0..3 inside the chunk) and element (0..3) that fill A-fragment register r, byte b.
constexpr int fp8_p_tile(int r, int b) { return 2 * (r >> 1) + (b >> 1); }
constexpr int fp8_p_elem(int r, int b) { return 2 * (r & 1) + (b & 1); }

// V^T workspace of the prep kernel: [batch, kv_heads, head_dim, keys padded to a multiple of the key tile] e4m3,
// keys permuted inside 32-key chunks; padded keys are zero.
constexpr long long fp8_vt_keys(long long seqlen_k, int key_tile) {
  return (seqlen_k + key_tile - 1) / key_tile * key_tile;
}

}  // namespace flashkit::cuda
