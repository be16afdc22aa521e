// The static tile schedule of the persistent warp-specialized Hopper forward (flash_fwd_sm90_ws.cuh, PERSISTENT):
// pure functions, compiled for the device and for the host (the CPU build's tests check them).
// Work tiles are numbered as the one-CTA-per-tile grid launches its blocks: the query tile fastest (longest causal
// tile first), then the head (KV head when the GQA group is packed), then the batch slot, so tiles in flight at once
// share their heads' K/V in L2. A grid of G CTAs takes them in rounds of G: in round j CTA c runs tile j*G + c, or
// j*G + G-1-c in odd rounds. The reversal pairs a long causal tile with a short one for each CTA: with the query
// tile fastest, G a multiple of the tiles per head would otherwise give CTA c the same diagonal position (the same
// length) in every round, and the longest one sets the kernel's time.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define FK_WS_HD __host__ __device__
#else
#define FK_WS_HD
#endif

namespace flashkit::cuda {

struct WsTileCoord {
  int mb;     // query tile (block of BM rows) of its (head, sequence)
  int hblk;   // query head, or KV head when the group is packed
  int bslot;  // batch slot (varlen: sequence)
};

// Tile `tile` of a grid of mblocks x hblocks x batch work tiles (fewer than kWsMaxTiles: 32-bit indices, which
// keep the producer's 24 registers enough).
constexpr int64_t kWsMaxTiles = int64_t(1) << 30;
FK_WS_HD constexpr WsTileCoord ws_tile_coord(int tile, int mblocks, int hblocks) {
  const int x = tile % mblocks, yz = tile / mblocks;
  return WsTileCoord{mblocks - 1 - x, yz % hblocks, yz / hblocks};
}

// The tile CTA `cta` of a grid of `ctas` runs in round `round` (>= total: none this round; a CTA stops at the first
// round that starts at or past the total).
FK_WS_HD constexpr int ws_tile_of(int cta, int round, int ctas) {
  return round * ctas + ((round & 1) ? ctas - 1 - cta : cta);
}

// CTAs of the persistent grid: one per SM (the kernel's shared memory holds one CTA per SM), at most the tile count
// and at most `cap` (> 0; tests force small grids so that every CTA runs several tiles).
constexpr int ws_persistent_ctas(int64_t tiles, int sms, int cap) {
  int64_t n = sms < 1 ? 1 : sms;
  if (cap > 0 && cap < n) n = cap;
  if (tiles < n) n = tiles;
  return int(n < 1 ? 1 : n);
}

// ---- DENSE (the common prefill call: fixed-length batch, no window, no softcap, the GQA group not packed, head_dim
// equal to the instantiated D; ws_dense_shape in src/ops/attention_choice.cpp): the tile's place in 32-bit
// arithmetic, its divisors prepared on the host (v27). The general path's int64 divisions and FwdTile walk are
// hundreds of dependent instructions per tile on the consumers' path.

// Division by a fixed d (1 <= d < 2^31) of n < 2^31 as a multiply-high, an add and a shift: with l = ceil(log2 d)
// and mul = floor(2^32 (2^l - d) / d) + 1, n / d = (umulhi(n, mul) + n) >> l (Granlund and Montgomery's
// round-up method; the add cannot overflow 32 bits since umulhi(n, mul) <= n < 2^31).
struct FastDivmod {
  uint32_t d = 1, mul = 1, shift = 0;
};
FK_WS_HD constexpr FastDivmod make_fast_divmod(uint32_t d) {
  uint32_t l = 0;
  while (l < 32 && (uint64_t(1) << l) < d) ++l;
  FastDivmod f;
  f.d = d;
  f.shift = l;
  f.mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << l) - d)) / d + 1);
  return f;
}
FK_WS_HD inline uint32_t fast_div(const FastDivmod& f, uint32_t n) {
#if defined(__CUDA_ARCH__)
  const uint32_t hi = __umulhi(n, f.mul);
#else
  const uint32_t hi = uint32_t((uint64_t(n) * f.mul) >> 32);
#endif
  return (hi + n) >> f.shift;
}
// n / d and n % d (q, r).
FK_WS_HD inline void fast_divmod(const FastDivmod& f, uint32_t n, uint32_t& q, uint32_t& r) {
  q = fast_div(f, n);
  r = n - q * f.d;
}

// A dense call's grid of work tiles (mblocks x heads x batch, in ws_tile_coord's order) and key range, for row and key
// tiles of BM and BN.
struct WsDenseGeom {
  int mblocks = 0, heads = 0, total = 0;
  FastDivmod by_mblocks, by_heads, by_group;  // group: query heads per KV head
  int seqlen_q = 0, seqlen_k = 0, nblocks_k = 0;  // nblocks_k: key tiles of BN
};
// Host: the call's geometry (the choice has checked that every count fits: ws_dense_shape).
inline WsDenseGeom make_ws_dense_geom(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seqlen_q,
                                      int64_t seqlen_k, int bm, int bn) {
  WsDenseGeom g;
  g.mblocks = int((seqlen_q + bm - 1) / bm);
  g.heads = int(heads);
  g.total = int(int64_t(g.mblocks) * heads * batch);
  g.by_mblocks = make_fast_divmod(uint32_t(g.mblocks));
  g.by_heads = make_fast_divmod(uint32_t(heads));
  g.by_group = make_fast_divmod(uint32_t(heads / kv_heads));
  g.seqlen_q = int(seqlen_q);
  g.seqlen_k = int(seqlen_k);
  g.nblocks_k = int((seqlen_k + bn - 1) / bn);
  return g;
}

// Tile `tile` (< total): ws_tile_coord's place, and the KV head of its query head.
struct WsDenseTile {
  int mb, h, b, kvh;
};
FK_WS_HD inline WsDenseTile ws_dense_tile(const WsDenseGeom& g, int tile) {
  uint32_t yz, x, b, h;
  fast_divmod(g.by_mblocks, uint32_t(tile), yz, x);
  fast_divmod(g.by_heads, yz, b, h);
  return WsDenseTile{g.mblocks - 1 - int(x), int(h), int(b), int(fast_div(g.by_group, h))};
}

// Keys the query rows [r0, r1] (r0 <= r1 < seqlen_q) see, as TileKeys (flash_common.cuh) has them under a causal
// mask or none: every row sees keys from 0 (lo_max 0), up to i + seqlen_k - seqlen_q + 1 under the causal mask
// (clamped to [0, seqlen_k]); key tiles [nb_begin, nb_end), empty when no row sees a key.
struct WsDenseKeys {
  int nb_begin, nb_end, lo_max, hi_min;
};
FK_WS_HD inline int ws_dense_hi(const WsDenseGeom& g, bool causal, int i) {
  if (!causal) return g.seqlen_k;
  const int hi = i + (g.seqlen_k - g.seqlen_q) + 1;
  return hi > g.seqlen_k ? g.seqlen_k : (hi < 0 ? 0 : hi);
}
FK_WS_HD inline WsDenseKeys ws_dense_keys(const WsDenseGeom& g, bool causal, int r0, int r1, int bn) {
  if (!causal) return WsDenseKeys{0, g.nblocks_k, 0, g.seqlen_k};
  const int khi = ws_dense_hi(g, true, r1);
  return WsDenseKeys{0, khi > 0 ? (khi + bn - 1) / bn : 0, 0, ws_dense_hi(g, true, r0)};
}

}  // namespace flashkit::cuda
