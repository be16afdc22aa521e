// CPU flash attention: picks the widest instruction set this CPU supports at run time, and states the
// cost model. The algorithm itself is in attention_flash.inc.
#include "kernels/cpu/attention_flash.hpp"

#include <string>

#include "flashkit/runtime.hpp"
#include "kernels/registry.hpp"

namespace flashkit::kernels {

void attention_forward_cpu_flash(const AttentionFwdArgs& a) {
  const std::string isa = cpu_isa();
#ifdef FLASHKIT_HAVE_AVX512
  if (isa == "avx512") return avx512::flash_forward(a);
#endif
  if (isa == "avx512" || isa == "avx2") return avx2::flash_forward(a);
  scalar::flash_forward(a);
}

void attention_backward_cpu_flash(const AttentionBwdArgs& g) {
  const std::string isa = cpu_isa();
#ifdef FLASHKIT_HAVE_AVX512
  if (isa == "avx512") return avx512::flash_backward(g);
#endif
  if (isa == "avx512" || isa == "avx2") return avx2::flash_backward(g);
  scalar::flash_backward(g);
}

namespace {
std::string kernel_name() { return "cpu.flash." + cpu_isa(); }

// Number of query tiles per (sequence, head), summed over sequences.
double query_tiles(const AttentionShape& s, int64_t bq) {
  double t = 0;
  for (int64_t b = 0; b < s.batch; ++b) t += double((seq_range(s, b).nq + bq - 1) / bq);
  return t;
}
double total_rows(const AttentionShape& s, bool q) {
  double t = 0;
  for (int64_t b = 0; b < s.batch; ++b) t += double(q ? seq_range(s, b).nq : seq_range(s, b).nk);
  return t;
}
}  // namespace

OpCost attention_forward_cpu_flash_cost(const AttentionFwdArgs& a) {
  const AttentionShape& s = a.shape;
  const FlashBlocks blk = flash_cpu_blocks(s.head_dim);
  const double e = double(dtype_size(a.dtype)), d = double(s.head_dim), H = double(s.heads);
  const double tiled = attention_tiled_pairs(s, a.mask, blk.bq, blk.bk);  // (query, key) pairs computed per head
  OpCost c;
  c.flops = 4.0 * tiled * d * H;
  // Q read and O written once; each query tile streams the K and V tiles it needs: (tiled pairs / bq) keys.
  c.bytes_read = H * e * d * (total_rows(s, true) + 2.0 * tiled / double(blk.bq));
  c.bytes_written = H * (e * d * total_rows(s, true) + 4.0 * total_rows(s, true));
  const double tile_bytes = 4.0 * double(2 * blk.bq * s.head_dim + 2 * blk.bk * s.head_dim + blk.bq * blk.bk);
  c.workspace_bytes = tile_bytes * num_threads();
  c.model = "flash: Q, O once; K, V once per " + std::to_string(blk.bq) + "-row query tile (tiles in L2, M=" +
            std::to_string(int64_t(tile_bytes) / 1024) + " KiB)";
  c.kernel = kernel_name();
  (void)query_tiles;
  return c;
}

OpCost attention_backward_cpu_flash_cost(const AttentionBwdArgs& g) {
  const AttentionFwdArgs& a = g.fwd;
  const AttentionShape& s = a.shape;
  const FlashBlocks blk = flash_cpu_blocks(s.head_dim);
  const double e = double(dtype_size(a.dtype)), d = double(s.head_dim), H = double(s.heads);
  const double tiled = attention_tiled_pairs(s, a.mask, blk.bq, blk.bk);
  const double nq = total_rows(s, true), nk = total_rows(s, false);
  const double dp = double((s.head_dim + 15) / 16 * 16);
  OpCost c;
  c.flops = 10.0 * tiled * d * H;  // S, dP recomputed; dV, dK, dQ
  // Each key tile streams Q, dO (and lse, D) of the query tiles that see it, and reads/writes the f32 dQ
  // accumulator for them; K, V read once, dK, dV written once; a pre-pass reads O, dO for D.
  const double q_stream = tiled / double(blk.bk);  // query rows streamed per head
  c.bytes_read = H * (e * d * (2 * nq) + q_stream * (2 * e * d + 8.0 + 4.0 * dp)) + double(s.kv_heads) * 2 * e * d * nk;
  c.bytes_written = H * (q_stream * 4.0 * dp + e * d * nq) + double(s.kv_heads) * 2 * e * d * nk;
  c.workspace_bytes = H * nq * (4.0 * dp + 4.0) + num_threads() * 4.0 * double(blk.bq * blk.bk * 2 + 6 * blk.bk * dp);
  c.model = "flash bwd: K, V once; Q, dO and the f32 dQ accumulator once per " + std::to_string(blk.bk) +
            "-key tile that sees them";
  c.kernel = kernel_name();
  return c;
}

}  // namespace flashkit::kernels
