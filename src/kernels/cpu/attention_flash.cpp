// CPU flash attention: picks the widest instruction set this CPU supports at run time, and states the
// cost model. The algorithm itself is in attention_flash.inc.
#include "kernels/cpu/attention_flash.hpp"

#include <algorithm>
#include <string>

#include "flashkit/runtime.hpp"
#include "kernels/registry.hpp"

namespace flashkit::kernels {

void attention_forward_cpu_flash(const AttentionFwdArgs& a, CpuIsaCap cap) {
  const std::string isa = cpu_isa(cap);
  const bool decode = flash_cpu_uses_decode(a.shape);
#ifdef FLASHKIT_HAVE_AVX512
  if (isa == "avx512") return decode ? avx512::flash_decode(a) : avx512::flash_forward(a);
#endif
  if (isa == "avx512" || isa == "avx2") return decode ? avx2::flash_decode(a) : avx2::flash_forward(a);
  decode ? scalar::flash_decode(a) : scalar::flash_forward(a);
}

void attention_backward_cpu_flash(const AttentionBwdArgs& g, CpuIsaCap cap) {
  const std::string isa = cpu_isa(cap);
#ifdef FLASHKIT_HAVE_AVX512
  if (isa == "avx512") return avx512::flash_backward(g);
#endif
  if (isa == "avx512" || isa == "avx2") return avx2::flash_backward(g);
  scalar::flash_backward(g);
}

namespace {
std::string kernel_name(CpuIsaCap cap) { return "cpu.flash." + cpu_isa(cap); }

double total_rows(const AttentionShape& s, bool q) {
  double t = 0;
  for (int64_t b = 0; b < s.batch; ++b) t += double(q ? seq_range(s, b).nq : seq_range(s, b).nk);
  return t;
}
double padded(double rows, int64_t tile) { return rows + double(tile); }  // upper bound of tile padding
}  // namespace

// Decode path: each chunk of keys is read once for all heads; partial outputs are written and combined.
static OpCost decode_cost(const AttentionFwdArgs& a, CpuIsaCap cap) {
  const AttentionShape& s = a.shape;
  const int64_t bk = flash_cpu_blocks(s.head_dim).bk;
  const double e = double(dtype_size(a.dtype)), d = double(s.head_dim), H = double(s.heads), Hk = double(s.kv_heads);
  const double dp = double((s.head_dim + 15) / 16 * 16);
  const double nq = total_rows(s, true), nk = total_rows(s, false);
  OpCost c;
  c.flops = 4.0 * attention_tiled_pairs(s, a.mask, std::max<int64_t>(1, s.max_seqlen_q), bk) * d * H;
  const int threads = num_threads();
  const double chunks = double(std::max<int64_t>(1, (4 * threads + s.batch - 1) / s.batch));
  const double partial = chunks * H * nq * (dp + 2) * 4.0;
  c.bytes_read = H * e * d * nq + Hk * 2 * e * d * nk + partial;
  c.bytes_written = H * (e * d * nq + 4.0 * nq) + partial;
  c.workspace_bytes = partial + threads * 4.0 * double((2 * s.group() * s.max_seqlen_q * s.kv_heads + bk) * dp + d * bk);
  c.model = "flash decode: K,V read once for all heads, split along the keys; partial O,m,l written and combined";
  c.kernel = kernel_name(cap) + ".decode";
  return c;
}

OpCost attention_forward_cpu_flash_cost(const AttentionFwdArgs& a, CpuIsaCap cap) {
  if (flash_cpu_uses_decode(a.shape)) return decode_cost(a, cap);
  const AttentionShape& s = a.shape;
  const FlashBlocks blk = flash_cpu_blocks(s.head_dim);
  const double e = double(dtype_size(a.dtype)), d = double(s.head_dim), H = double(s.heads), Hk = double(s.kv_heads);
  const double dp = double((s.head_dim + 15) / 16 * 16);
  const double tiled = attention_tiled_pairs(s, a.mask, blk.bq, blk.bk);  // (query, key) pairs computed per head
  const double nq = total_rows(s, true), nk = total_rows(s, false);
  OpCost c;
  c.flops = 4.0 * tiled * d * H;
  // Packed: K, V read once and written as contiguous f32 tiles, then each query tile streams the packed
  // K, V tiles it needs (tiled pairs / bq keys). Unpacked (decode shapes): each query tile reads the K, V
  // rows it needs from the caller's tensors. Q read and O, lse written once either way.
  const bool packed = flash_cpu_packs_kv(s);
  const double stream_elem = packed ? 4.0 : e;
  c.bytes_read = H * e * d * nq + (packed ? Hk * 2 * e * d * nk : 0.0) + H * 2 * stream_elem * d * tiled / double(blk.bq);
  c.bytes_written = (packed ? Hk * 2 * 4.0 * d * nk : 0.0) + H * (e * d * nq + 4.0 * nq);
  const double tile_bytes = 4.0 * double(2 * blk.bq * s.head_dim + blk.bq * blk.bk);
  c.workspace_bytes = (packed ? Hk * 4.0 * (d + dp) * padded(nk, blk.bk) : 4.0 * (d + dp) * blk.bk * num_threads()) +
                      tile_bytes * num_threads();
  c.model = std::string(packed ? "flash: K,V packed once; Q, O once; packed K,V" : "flash (decode shape): Q, O once; K,V") +
            " once per " + std::to_string(blk.bq) +
            "-row query tile (working set " + std::to_string(int64_t(tile_bytes + 4.0 * 2 * blk.bk * s.head_dim) / 1024) +
            " KiB in L2)";
  c.kernel = kernel_name(cap);
  return c;
}

OpCost attention_backward_cpu_flash_cost(const AttentionBwdArgs& g, CpuIsaCap cap) {
  const AttentionFwdArgs& a = g.fwd;
  const AttentionShape& s = a.shape;
  const FlashBlocks blk = flash_cpu_blocks(s.head_dim);
  const double e = double(dtype_size(a.dtype)), d = double(s.head_dim), H = double(s.heads), Hk = double(s.kv_heads);
  const double tiled = attention_tiled_pairs(s, a.mask, blk.bq, blk.bk);
  const double nq = total_rows(s, true), nk = total_rows(s, false);
  const double dp = double((s.head_dim + 15) / 16 * 16);
  OpCost c;
  c.flops = 10.0 * tiled * d * H;  // S, dP recomputed; dV, dK, dQ
  // Pre-pass: Q, dO packed to f32 tiles, O read for D = rowsum(dO o O). Main loop: each key tile reads
  // K, V once and streams the packed Q, dO (+ lse, D) of the query tiles that see it, adding into the
  // f32 dQ accumulator; dK, dV written once; dQ converted at the end.
  const double q_stream = tiled / double(blk.bk);  // query rows streamed per head
  c.bytes_read = H * 3 * e * d * nq + Hk * 2 * e * d * nk + H * q_stream * (2 * 4.0 * dp + 8.0 + 4.0 * dp) +
                 H * 4.0 * dp * nq;
  c.bytes_written = H * 2 * 4.0 * dp * nq + H * q_stream * 4.0 * dp + H * e * d * nq + Hk * 2 * e * d * nk;
  c.workspace_bytes = H * padded(nq, blk.bq) * 4.0 * (3 * dp + 1) + num_threads() * 4.0 * double(blk.bq * blk.bk * 2 + 6 * blk.bk * dp);
  c.model = "flash bwd: Q,dO packed once; K,V once; packed Q,dO and the f32 dQ accumulator once per " +
            std::to_string(blk.bk) + "-key tile that sees them";
  c.kernel = kernel_name(cap);
  return c;
}

}  // namespace flashkit::kernels
