// Which weight bytes a decode kernel prefetches into L2 for the GEMV that runs after it (issue 18 Required 5,
// docs/worklog/mamba-decode-cuda.md v5). Pure: compiled in every build, unit-tested on the CPU
// (tests/engine/test_l2_prefetch_plan.cpp); the range functions are constexpr so the kernels walk the same ranges.
//
// Why: at batch 1 a Mamba layer is in_proj GEMV -> mixer -> out_proj GEMV. The mixer reads ~4 MB in ~10-13 us
// (latency-bound), so HBM idles under it, and out_proj (26 MB at mamba-2.8b) then streams at only ~2.2 TB/s: a
// launch's ramp and tail dominate at that size. If the mixer's blocks issue `cp.async.bulk.prefetch.L2` over the
// out_proj weights, out_proj reads L2. Mode `all` also has out_proj (which then hardly uses HBM) prefetch the head of
// the next layer's in_proj. A prefetch is a hint: results never change (the tests compare bits with it on and off).
//
// Layout of a prefetch: the consumer GEMV's weight matrix, `bytes` long, is cut into stripes of `stripe` bytes (one
// consumer block's contiguous rows, which it reads front to back, all blocks at once); of each stripe the first
// `head` bytes are prefetched (all of it when head >= stripe). Stripe s is issued by block s % blocks of the
// prefetching kernel, by one thread, in requests of at most kL2PrefetchChunk bytes, 16-byte aligned (the PTX rule:
// address 16-byte aligned, size a multiple of 16).
#pragma once
#include <cstdint>

namespace flashkit::engine {

// Tuning::cuda_l2_prefetch (FLASHKIT_CUDA_L2_PREFETCH=0|out|all|late). late: out's plan, issued by the mixer after
// its x_proj rows instead of before its PDL wait (A/B: whether the prefetch slows the mixer's own dependent loads).
enum class L2PrefetchMode { off = 0, out = 1, all = 2, late = 3 };

// Bytes of one prefetch request: large enough that a block issues few (mamba-2.8b: 26 MB over 80 mixer blocks, ~13
// requests a block, one instruction each), small enough that one block's requests arrive in order; below the 48 KB
// requests the GEMV's own stripe prefetch (FLASHKIT_CUDA_PREFETCH) has issued on the H200 (the PTX ISA states no
// maximum size).
constexpr int64_t kL2PrefetchChunk = int64_t(32) << 10;
constexpr int64_t kL2PrefetchAlign = 16;
// Share of the L2 the prefetched bytes of one hand-over may take together (what is prefetched under the mixer plus
// what out_proj prefetches of the next in_proj while it still reads its own lines): 3/4. The rest holds the states,
// activations and small weights the kernels touch meanwhile, and is slack for the L2's two partitions and its
// replacement policy (a line evicted before it is read costs its HBM read twice).
constexpr int64_t l2_prefetch_budget(int64_t l2_bytes) { return l2_bytes > 0 ? l2_bytes / 4 * 3 : 0; }

struct L2PrefetchPlan {
  int64_t bytes = 0;   // the consumer's weight bytes (0: no prefetch)
  int64_t stripe = 0;  // bytes per stripe (> 0 when bytes > 0; a multiple of 16)
  int64_t head = 0;    // bytes prefetched at the start of each stripe (a multiple of 16, <= stripe)
  constexpr bool active() const { return bytes > 0 && head > 0; }
};

// Under the mixer: the out_proj GEMV's weights (`bytes`, stripes of `stripe` bytes: its rows per block x K x 2), all
// of them when they fit the budget, else the same head of every stripe; none in mode off, without a stripe, or when
// the L2 size is unknown (0).
L2PrefetchPlan l2_prefetch_under_mixer(L2PrefetchMode mode, int64_t bytes, int64_t stripe, int64_t l2_bytes);
// Under a GEMV whose own `current` bytes were prefetched (mode all only): the head of every stripe of the next GEMV
// (`next` bytes, stripes of `next_stripe`), as much as the budget leaves beside `current`.
L2PrefetchPlan l2_prefetch_under_gemv(L2PrefetchMode mode, int64_t current, int64_t next, int64_t next_stripe,
                                      int64_t l2_bytes);

struct ByteRange {
  int64_t begin = 0, end = 0;  // [begin, end), 16-byte aligned offsets into the weights
};
constexpr int64_t l2_prefetch_stripes(const L2PrefetchPlan& p) {
  return p.active() && p.stripe > 0 ? (p.bytes + p.stripe - 1) / p.stripe : 0;
}
// The bytes of stripe s, never past the weights' end (the last stripe may be short; a tail under 16 bytes is left
// out: the weights are rows of K % 8 == 0 bf16 values, so it never occurs in the engine).
constexpr ByteRange l2_prefetch_range(const L2PrefetchPlan& p, int64_t s) {
  const int64_t b = s * p.stripe;
  if (!p.active() || s < 0 || b >= p.bytes) return {b, b};
  const int64_t want = p.head < p.stripe ? p.head : p.stripe;
  const int64_t e = b + want < p.bytes ? b + want : p.bytes;
  return {b, b + (e - b) / kL2PrefetchAlign * kL2PrefetchAlign};
}

// Bytes a plan prefetches in all (the sum of its stripes' ranges).
constexpr int64_t l2_prefetch_total(const L2PrefetchPlan& p) {
  int64_t t = 0;
  for (int64_t s = 0; s < l2_prefetch_stripes(p); ++s) t += l2_prefetch_range(p, s).end - l2_prefetch_range(p, s).begin;
  return t;
}

// The requests block `block` of `blocks` issues: fn(offset, size) per request, for its stripes block, block + blocks,
// ... in order, each in kL2PrefetchChunk pieces (offset 16-byte aligned, size a multiple of 16, never past the end).
// The kernels call it with a lambda that issues cp.async.bulk.prefetch.L2 (engine/cuda/common.cuh prefetch_l2_plan).
template <typename Fn>
constexpr void l2_prefetch_requests(const L2PrefetchPlan& p, int64_t block, int64_t blocks, Fn&& fn) {
  const int64_t stripes = l2_prefetch_stripes(p);
  for (int64_t s = block; blocks > 0 && s < stripes; s += blocks) {
    const ByteRange r = l2_prefetch_range(p, s);
    for (int64_t b = r.begin; b < r.end; b += kL2PrefetchChunk)
      fn(b, r.end - b < kL2PrefetchChunk ? r.end - b : kL2PrefetchChunk);
  }
}

}  // namespace flashkit::engine
