// The CPU training backend, templated on the scalar type: f32 (training: OpenBLAS sgemm, OpenMP, flash attention)
// and f64 (the finite-difference gradient tests: dgemm and the reference attention). Every reduction runs in a
// fixed order (per-column passes, fixed chunks), so a step's result does not depend on thread timing: a resumed
// run continues bit-identically.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "train/backend.hpp"
#include "train/cpu_ssm.hpp"

namespace flashkit::train {
namespace {

[[noreturn]] void internal(const std::string& m) { fail(Status::internal, "train cpu backend: " + m); }

template <class T>
class CpuBackend final : public Backend {
 public:
  static constexpr DType kType = std::is_same_v<T, float> ? DType::f32 : DType::f64;

  explicit CpuBackend(int threads) : threads_(threads > 0 ? threads : num_threads()) {}
  ~CpuBackend() override {
    for (auto& [p, n] : owned_) std::free(p);
  }
  Device device() const override { return Device::cpu; }
  std::string name() const override {
    return std::string("cpu ") + (kType == DType::f32 ? "f32" : "f64") + " (" + std::to_string(threads_) + " threads)";
  }
  DType param_dtype() const override { return kType; }
  DType act_dtype() const override { return kType; }

  Mat alloc(DType dtype, int64_t rows, int64_t cols) override {
    if (rows < 0 || cols < 0) internal("negative allocation");
    const size_t bytes = size_t(std::max<int64_t>(1, rows * cols)) * size_t(dtype_size(dtype));
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) fail(Status::out_of_memory, "train: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, bytes);
    owned_[p] = bytes;
    return Mat{p, dtype, rows, cols, cols};
  }
  void free(Mat& m) override {
    if (!m.data) return;
    auto it = owned_.find(m.data);
    if (it == owned_.end()) internal("free of a buffer this backend does not own");
    std::free(it->first);
    owned_.erase(it);
    m = Mat{};
  }
  void upload(const Mat& dst, const void* host, size_t bytes) override { std::memcpy(dst.data, host, bytes); }
  void download(void* host, const Mat& src, size_t bytes) override { std::memcpy(host, src.data, bytes); }
  void zero(const Mat& m) override { std::memset(m.data, 0, size_t(m.numel() * dtype_size(m.dtype))); }
  void copy(const Mat& dst, const Mat& src) override {
    const size_t row_bytes = size_t(src.cols * dtype_size(src.dtype));
    for (int64_t r = 0; r < src.rows; ++r)
      std::memcpy(static_cast<char*>(dst.data) + r * dst.ld * dtype_size(dst.dtype),
                  static_cast<const char*>(src.data) + r * src.ld * dtype_size(src.dtype), row_bytes);
  }

  void embedding_fwd(const Mat& ids, const Mat& table, const Mat& out, float scale) override {
    const int32_t* id = static_cast<const int32_t*>(ids.data);
    const T s = T(scale);
#pragma omp parallel for schedule(static) num_threads(threads_) if (out.rows * out.cols > 32768)
    for (int64_t r = 0; r < out.rows; ++r) {
      const T* src = row(table, id[r]);
      T* dst = row(out, r);
      for (int64_t c = 0; c < out.cols; ++c) dst[c] = src[c] * s;
    }
  }
  void embedding_bwd(const Mat& ids, const Mat& dout, const Mat& dtable, float scale) override {
    // Columns split across threads, rows in order: no two threads touch one element, the sum order is fixed.
    const int32_t* id = static_cast<const int32_t*>(ids.data);
    const T s = T(scale);
    const int64_t C = dout.cols, chunk = 64, nchunks = (C + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) num_threads(threads_) if (dout.rows * C > 32768)
    for (int64_t ch = 0; ch < nchunks; ++ch) {
      const int64_t c0 = ch * chunk, c1 = std::min(C, c0 + chunk);
      for (int64_t r = 0; r < dout.rows; ++r) {
        const T* g = row(dout, r);
        T* d = row(dtable, id[r]);
        for (int64_t c = c0; c < c1; ++c) d[c] += s * g[c];
      }
    }
  }

  void rmsnorm_fwd(const Mat& x, const Mat& w, const Mat& out, const Mat& rstd, int64_t group, float eps,
                   bool plus_one) override {
    const int64_t G = x.cols / group;
    const T* wv = static_cast<const T*>(w.data);
    const T one = plus_one ? T(1) : T(0);
#pragma omp parallel for schedule(static) num_threads(threads_) if (x.rows * x.cols > 32768)
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t g = 0; g < G; ++g) {
        const T* xi = row(x, r) + g * group;
        T* o = row(out, r) + g * group;
        double ss = 0;
        for (int64_t i = 0; i < group; ++i) ss += double(xi[i]) * double(xi[i]);
        const T rs = T(1.0 / std::sqrt(ss / double(group) + double(eps)));
        row(rstd, r)[g] = rs;
        for (int64_t i = 0; i < group; ++i) o[i] = xi[i] * rs * (one + wv[i]);
      }
  }
  void rmsnorm_bwd(const Mat& dout, const Mat& x, const Mat& w, const Mat& rstd, const Mat& dx, const Mat& dw,
                   int64_t group, bool plus_one, bool accumulate) override {
    const int64_t G = x.cols / group;
    const T* wv = static_cast<const T*>(w.data);
    const T one = plus_one ? T(1) : T(0);
    // dw first (dx may alias dout): columns of the group split across threads, rows and groups in order.
    T* dwv = static_cast<T*>(dw.data);
    const int64_t chunk = 32, nchunks = (group + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) num_threads(threads_) if (x.rows * x.cols > 32768)
    for (int64_t ch = 0; ch < nchunks; ++ch) {
      const int64_t i0 = ch * chunk, i1 = std::min(group, i0 + chunk);
      for (int64_t r = 0; r < x.rows; ++r)
        for (int64_t g = 0; g < G; ++g) {
          const T* xi = row(x, r) + g * group;
          const T* di = row(dout, r) + g * group;
          const T rs = row(rstd, r)[g];
          for (int64_t i = i0; i < i1; ++i) dwv[i] += di[i] * xi[i] * rs;
        }
    }
#pragma omp parallel for schedule(static) num_threads(threads_) if (x.rows * x.cols > 32768)
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t g = 0; g < G; ++g) {
        const T* xi = row(x, r) + g * group;
        const T* di = row(dout, r) + g * group;
        T* o = row(dx, r) + g * group;
        const T rs = row(rstd, r)[g];
        // dx = rs * (dxhat - xhat * mean(dxhat * xhat)), dxhat = dout * w', xhat = x * rs
        T dot = 0;
        for (int64_t i = 0; i < group; ++i) dot += di[i] * (one + wv[i]) * xi[i];
        const T k = dot * rs * rs / T(group);
        for (int64_t i = 0; i < group; ++i) {
          const T v = rs * (di[i] * (one + wv[i]) - xi[i] * k);
          o[i] = accumulate ? o[i] + v : v;
        }
      }
  }

  void matmul(const Mat& A, bool transA, const Mat& B, bool transB, const Mat& C, float alpha, float beta) override {
    if (A.dtype != kType || B.dtype != kType || C.dtype != kType) internal("matmul dtype");
    const int64_t M = transA ? A.cols : A.rows, K = transA ? A.rows : A.cols;
    const int64_t N = transB ? B.rows : B.cols, KB = transB ? B.cols : B.rows;
    if (KB != K || C.rows != M || C.cols != N) internal("matmul shapes");
    if (M == 0 || N == 0) return;
    // OpenMP splits C into slices along its larger side and each thread runs a single-threaded GEMM on its slice
    // (as the engine does): OpenBLAS's own pthreads would compete with the OpenMP workers, and every element of C
    // is computed by one call in a fixed order, so the result does not depend on the thread count's timing.
    openblas_set_num_threads(1);
    const bool by_rows = M >= N;
    const int64_t len = by_rows ? M : N;
    const int nt = int(std::max<int64_t>(1, std::min<int64_t>(threads_, (M * N * K) >> 15 ? (len + 15) / 16 : 1)));
    const int64_t slice = ((len + nt - 1) / nt + 15) / 16 * 16;
    const T* a = static_cast<const T*>(A.data);
    const T* b = static_cast<const T*>(B.data);
    T* c = static_cast<T*>(C.data);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int i = 0; i < nt; ++i) {
      const int64_t s0 = std::min<int64_t>(len, int64_t(i) * slice), s1 = std::min<int64_t>(len, s0 + slice);
      if (s0 >= s1) continue;
      const T* as = by_rows ? (transA ? a + s0 : a + s0 * A.ld) : a;
      const T* bs = by_rows ? b : (transB ? b + s0 * B.ld : b + s0);
      T* cs = by_rows ? c + s0 * C.ld : c + s0;
      gemm(transA, transB, by_rows ? s1 - s0 : M, by_rows ? N : s1 - s0, K, alpha, as, A.ld, bs, B.ld, beta, cs, C.ld);
    }
  }
  static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const T* A, int64_t lda, const T* B,
                   int64_t ldb, float beta, T* C, int64_t ldc) {
    const auto tA = ta ? CblasTrans : CblasNoTrans, tB = tb ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, tA, tB, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
    else
      cblas_dgemm(CblasRowMajor, tA, tB, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
  }

  void rope_fwd(const Mat& x, int64_t seq, int64_t heads, int64_t hd, const Mat& cos, const Mat& sin) override {
    rope(x, seq, heads, hd, cos, sin, T(1));
  }
  void rope_bwd(const Mat& dx, int64_t seq, int64_t heads, int64_t hd, const Mat& cos, const Mat& sin) override {
    rope(dx, seq, heads, hd, cos, sin, T(-1));  // the inverse rotation
  }

  void attention_fwd(const Mat& q, const Mat& k, const Mat& v, const Mat& o, const Mat& lse,
                     const AttnShape& s) override {
    const int64_t slices = s.batch * s.kv_heads;
    if (slices < threads_ && kType == DType::f32) {
      // Few slices: one call with every thread (the forward's result does not depend on the split).
      attend(false, s, 0, s.batch, 0, s.kv_heads, threads_, q, k, v, o, lse, nullptr, nullptr, nullptr, nullptr);
      return;
    }
    std::exception_ptr err;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (int64_t i = 0; i < slices; ++i) {
      try {
        attend(false, s, i / s.kv_heads, 1, i % s.kv_heads, 1, 1, q, k, v, o, lse, nullptr, nullptr, nullptr, nullptr);
      } catch (...) {
#pragma omp critical(flashkit_train_attention_error)
        if (!err) err = std::current_exception();
      }
    }
    if (err) std::rethrow_exception(err);  // exceptions must not leave an OpenMP region
  }
  void attention_bwd(const Mat& dout, const Mat& q, const Mat& k, const Mat& v, const Mat& o, const Mat& lse,
                     const Mat& dq, const Mat& dk, const Mat& dv, const AttnShape& s) override {
    // One single-threaded call per (sequence, kv head): the flash backward accumulates dQ across key blocks in
    // thread-timing order, so threads run over independent slices instead (deterministic, still parallel).
    const int64_t slices = s.batch * s.kv_heads;
    std::exception_ptr err;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (int64_t i = 0; i < slices; ++i) {
      try {
        attend(true, s, i / s.kv_heads, 1, i % s.kv_heads, 1, 1, q, k, v, o, lse, &dout, &dq, &dk, &dv);
      } catch (...) {
#pragma omp critical(flashkit_train_attention_error)
        if (!err) err = std::current_exception();
      }
    }
    if (err) std::rethrow_exception(err);
  }

  void gated_act_fwd(const Mat& gu, const Mat& out, Act act) override {
    const int64_t F = out.cols;
#pragma omp parallel for schedule(static) num_threads(threads_) if (out.rows * F > 32768)
    for (int64_t r = 0; r < out.rows; ++r) {
      const T* g = row(gu, r);
      T* o = row(out, r);
      for (int64_t f = 0; f < F; ++f) o[f] = activation(g[f], act, nullptr) * g[F + f];
    }
  }
  void gated_act_bwd(const Mat& dout, const Mat& gu, const Mat& dgu, Act act) override {
    const int64_t F = dout.cols;
#pragma omp parallel for schedule(static) num_threads(threads_) if (dout.rows * F > 32768)
    for (int64_t r = 0; r < dout.rows; ++r) {
      const T* g = row(gu, r);
      const T* d = row(dout, r);
      T* o = row(dgu, r);
      for (int64_t f = 0; f < F; ++f) {
        T da;
        const T a = activation(g[f], act, &da);
        const T up = g[F + f];
        o[f] = d[f] * up * da;
        o[F + f] = d[f] * a;
      }
    }
  }
  void add_inplace(const Mat& y, const Mat& x) override {
#pragma omp parallel for schedule(static) num_threads(threads_) if (y.rows * y.cols > 32768)
    for (int64_t r = 0; r < y.rows; ++r) {
      T* a = row(y, r);
      const T* b = row(x, r);
      for (int64_t c = 0; c < y.cols; ++c) a[c] += b[c];
    }
  }

  void cross_entropy_chunk(const Mat& logits, const Mat& targets, const Mat& losses, float softcap,
                           float grad_scale) override {
    const int32_t* tg = static_cast<const int32_t*>(targets.data);
    const int64_t V = logits.cols;
    const T cap = T(softcap), gs = T(grad_scale);
#pragma omp parallel for schedule(static) num_threads(threads_)
    for (int64_t r = 0; r < logits.rows; ++r) {
      T* z = row(logits, r);
      T* loss = row(losses, r);
      const int32_t t = tg[r];
      if (t < 0) {
        *loss = 0;
        std::fill(z, z + V, T(0));
        continue;
      }
      if (cap > 0)
        for (int64_t j = 0; j < V; ++j) z[j] = cap * std::tanh(z[j] / cap);
      T mx = z[0];
      for (int64_t j = 1; j < V; ++j) mx = std::max(mx, z[j]);
      double sum = 0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(double(z[j] - mx));
      const T lse = mx + T(std::log(sum));
      *loss = lse - z[t];
      for (int64_t j = 0; j < V; ++j) {
        T p = std::exp(z[j] - lse);
        if (j == t) p -= 1;
        if (cap > 0) {
          const T th = z[j] / cap;  // tanh of the raw logit / cap
          p *= 1 - th * th;
        }
        z[j] = p * gs;
      }
    }
  }

  double global_norm_sq(const Mat& g) override {
    const T* p = static_cast<const T*>(g.data);
    const int64_t n = g.numel(), chunk = 16384, nchunks = (n + chunk - 1) / chunk;
    std::vector<double> part(size_t(nchunks), 0.0);
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > 65536)
    for (int64_t c = 0; c < nchunks; ++c) {
      double s = 0;
      for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) s += double(p[i]) * double(p[i]);
      part[size_t(c)] = s;
    }
    double s = 0;
    for (double x : part) s += x;
    return s;
  }
  void adamw_step(const Mat& params, const Mat& grads, const Mat& m, const Mat& v, const AdamW& h) override {
    T* p = static_cast<T*>(params.data);
    const T* g = static_cast<const T*>(grads.data);
    T* mm = static_cast<T*>(m.data);
    T* vv = static_cast<T*>(v.data);
    const int64_t n = params.numel();
    const T b1 = T(h.beta1), b2 = T(h.beta2), lr = T(h.lr), eps = T(h.eps), wd = T(h.weight_decay), gs = T(h.grad_scale);
    const T c1 = T(1) / (T(1) - T(std::pow(double(h.beta1), double(h.step))));
    const T c2 = T(1) / (T(1) - T(std::pow(double(h.beta2), double(h.step))));
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i] * gs;
      mm[i] = b1 * mm[i] + (T(1) - b1) * gi;
      vv[i] = b2 * vv[i] + (T(1) - b2) * gi * gi;
      const T update = (mm[i] * c1) / (std::sqrt(vv[i] * c2) + eps);
      p[i] -= lr * (update + wd * p[i]);
    }
  }
  void scale_inplace(const Mat& x, float s) override {
    T* p = static_cast<T*>(x.data);
    for (int64_t i = 0; i < x.numel(); ++i) p[i] *= T(s);
  }
  bool supports_ssm() const override { return true; }
  void conv1d_silu_fwd(const Mat& x, const Mat& w, const Mat& bias, const Mat& out, int64_t seq) override {
    cpu_ssm::conv1d_silu_fwd<T>(x, w, bias, out, seq, threads_);
  }
  void conv1d_silu_bwd(const Mat& dout, const Mat& x, const Mat& w, const Mat& bias, const Mat& dx, const Mat& dw,
                       const Mat& dbias, int64_t seq) override {
    cpu_ssm::conv1d_silu_bwd<T>(dout, x, w, bias, dx, dw, dbias, seq, threads_);
  }
  void selective_scan_fwd(const Mat& u, const Mat& delta, const Mat& A_log, const Mat& Bm, const Mat& Cm, const Mat& D,
                          const Mat& z, const Mat& delta_bias, const Mat& y, int64_t seq) override {
    const cpu_ssm::ScanIo io{&u, &delta, &A_log, &Bm, &Cm, &D, &z, &delta_bias};
    if constexpr (kType == DType::f32) cpu_ssm::scan_fwd_f32(io, y, seq, threads_);
    else cpu_ssm::scan_fwd_f64(io, y, seq, threads_);
  }
  void selective_scan_bwd(const Mat& dy, const Mat& u, const Mat& delta, const Mat& A_log, const Mat& Bm, const Mat& Cm,
                          const Mat& D, const Mat& z, const Mat& delta_bias, const Mat& du, const Mat& ddelta,
                          const Mat& dBm, const Mat& dCm, const Mat& dz, const Mat& dA_log, const Mat& dD,
                          const Mat& ddelta_bias, int64_t seq) override {
    const cpu_ssm::ScanIo io{&u, &delta, &A_log, &Bm, &Cm, &D, &z, &delta_bias};
    if constexpr (kType == DType::f32)
      cpu_ssm::scan_bwd_f32(io, dy, du, ddelta, dBm, dCm, dz, dA_log, dD, ddelta_bias, seq, threads_);
    else
      cpu_ssm::scan_bwd_f64(io, dy, du, ddelta, dBm, dCm, dz, dA_log, dD, ddelta_bias, seq);
  }

  bool all_finite(const Mat& x) override {
    for (int64_t r = 0; r < x.rows; ++r) {
      const T* p = row(x, r);
      for (int64_t c = 0; c < x.cols; ++c)
        if (!std::isfinite(p[c])) return false;
    }
    return true;
  }

 private:
  static T* row(const Mat& m, int64_t r) { return static_cast<T*>(m.data) + r * m.ld; }

  static T activation(T g, Act act, T* deriv) {
    if (act == Act::silu) {
      const T sg = T(1) / (T(1) + std::exp(-g));
      if (deriv) *deriv = sg * (T(1) + g * (T(1) - sg));
      return g * sg;
    }
    // gelu_tanh: 0.5 g (1 + tanh(k (g + 0.044715 g^3)))
    const T k = T(0.7978845608028654), a = T(0.044715);
    const T th = std::tanh(k * (g + a * g * g * g));
    if (deriv) *deriv = T(0.5) * (T(1) + th) + T(0.5) * g * (T(1) - th * th) * k * (T(1) + T(3) * a * g * g);
    return T(0.5) * g * (T(1) + th);
  }

  void rope(const Mat& x, int64_t seq, int64_t heads, int64_t hd, const Mat& cos, const Mat& sin, T sign) {
    const int64_t half = hd / 2;
#pragma omp parallel for schedule(static) num_threads(threads_) if (x.rows * x.cols > 32768)
    for (int64_t r = 0; r < x.rows; ++r) {
      const T* c = row(cos, r % seq);
      const T* s = row(sin, r % seq);
      T* base = row(x, r);
      for (int64_t h = 0; h < heads; ++h) {
        T* v = base + h * hd;
        for (int64_t i = 0; i < half; ++i) {
          const T a = v[i], b = v[i + half], si = sign * s[i];
          v[i] = a * c[i] - b * si;
          v[i + half] = b * c[i] + a * si;
        }
      }
    }
  }

  // Attention for sequences [b0, b0 + nb) and kv heads [h0, h0 + nh) (their query heads with them).
  void attend(bool backward, const AttnShape& s, int64_t b0, int64_t nb, int64_t h0, int64_t nh, int threads,
              const Mat& q, const Mat& k, const Mat& v, const Mat& o, const Mat& lse, const Mat* dout, const Mat* dq,
              const Mat* dk, const Mat* dv) {
    const int64_t G = s.heads / s.kv_heads, hd = s.head_dim, T_ = s.seq;
    const bool all_heads = nh == s.kv_heads;
    auto view = [&](const Mat& m, int64_t heads_in_view, int64_t head0) {
      TensorView t;
      t.data = static_cast<char*>(m.data) + (b0 * T_ * m.ld + head0 * hd) * dtype_size(m.dtype);
      t.dtype = m.dtype;
      t.device = Device::cpu;
      t.ndim = 4;
      t.shape = {nb, T_, heads_in_view, hd};
      t.strides = {T_ * m.ld, m.ld, hd, 1};
      return t;
    };
    const TensorView qv = view(q, nh * G, h0 * G), kv = view(k, nh, h0), vv = view(v, nh, h0),
                     ov = view(o, nh * G, h0 * G);
    TensorView lv;
    lv.data = static_cast<float*>(lse.data) + (b0 * s.heads + h0 * G) * T_;
    lv.dtype = DType::f32;
    lv.ndim = 3;
    lv.shape = {nb, nh * G, T_, 0};
    // Contiguous [nb, heads in the view, T]: a view of fewer heads than the model has covers one sequence.
    lv.strides = {nh * G * T_, T_, 1, 0};
    if (!all_heads && nb > 1) internal("attention slice");
    AttentionOptions opts;
    opts.scale = s.scale;
    opts.causal = true;
    opts.window_left = s.window > 0 ? s.window - 1 : -1;
    opts.softcap = s.softcap;
    opts.check_finite = false;
    opts.impl = kType == DType::f32 ? AttentionImpl::flash : AttentionImpl::reference;
    opts.threads = threads;
    if (!backward) {
      attention_forward(qv, kv, vv, ov, lv, opts);
    } else {
      attention_backward(view(*dout, nh * G, h0 * G), qv, kv, vv, ov, lv, view(*dq, nh * G, h0 * G), view(*dk, nh, h0),
                         view(*dv, nh, h0), opts);
    }
  }

  int threads_;
  std::unordered_map<void*, size_t> owned_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(DType dtype, int threads) {
  if (threads < 0) fail(Status::invalid_argument, "threads must be >= 0, got " + std::to_string(threads));
  if (dtype == DType::f32) return std::make_unique<CpuBackend<float>>(threads);
  if (dtype == DType::f64) return std::make_unique<CpuBackend<double>>(threads);
  fail(Status::invalid_argument, "train: the CPU backend computes in f32 or f64, not " + std::string(dtype_name(dtype)));
}

}  // namespace flashkit::train
