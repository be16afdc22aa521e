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

}  // namespace flashkit::cuda
