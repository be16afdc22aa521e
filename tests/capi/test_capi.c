/* The C API, from plain C99: defaults, tensor descriptors, a forward + backward where flash and the
 * reference agree, every NULL tensor argument, bad codes, costs and the info functions.
 * Prints each failure and a summary line; returns non-zero on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashkit/flashkit.h"

#include "check.h"

/* A small problem: B=2, Sq=9, Sk=13, H=4, Hkv=2, D=32, f32. */
enum { B = 2, SQ = 9, SK = 13, H = 4, HKV = 2, D = 32 };
#define NQ (B * SQ * H * D)
#define NK (B * SK * HKV * D)
#define NL (B * H * SQ)

typedef struct {
  float q[NQ], k[NK], v[NK], dout[NQ];
  float o[NQ], lse[NL], dq[NQ], dk[NK], dv[NK];
  fk_tensor tq, tk, tv, tdout, to, tlse, tdq, tdk, tdv;
} problem;

static unsigned long g_rng = 12345u;
static float uniform(void) { /* in [-1, 1), never 0 */
  float x;
  g_rng = g_rng * 6364136223846793005ul + 1442695040888963407ul;
  x = (float)((g_rng >> 33) & 0xffffff) / 8388608.0f - 1.0f;
  return x == 0.0f ? 1e-3f : x;
}

static void fill(float* x, int n) {
  int i;
  for (i = 0; i < n; ++i) x[i] = uniform();
}
static void poison(float* x, int n) {
  int i;
  for (i = 0; i < n; ++i) x[i] = NAN;
}

static void problem_init(problem* p) {
  const int64_t sq[4] = {B, SQ, H, D}, sk[4] = {B, SK, HKV, D}, sl[3] = {B, H, SQ};
  fill(p->q, NQ);
  fill(p->k, NK);
  fill(p->v, NK);
  fill(p->dout, NQ);
  poison(p->o, NQ);
  poison(p->lse, NL);
  poison(p->dq, NQ);
  poison(p->dk, NK);
  poison(p->dv, NK);
  CHECK(fk_tensor_init(&p->tq, p->q, FK_F32, FK_CPU, 4, sq) == FK_OK, "%s", fk_last_error());
  fk_tensor_init(&p->tk, p->k, FK_F32, FK_CPU, 4, sk);
  fk_tensor_init(&p->tv, p->v, FK_F32, FK_CPU, 4, sk);
  fk_tensor_init(&p->tdout, p->dout, FK_F32, FK_CPU, 4, sq);
  fk_tensor_init(&p->to, p->o, FK_F32, FK_CPU, 4, sq);
  fk_tensor_init(&p->tlse, p->lse, FK_F32, FK_CPU, 3, sl);
  fk_tensor_init(&p->tdq, p->dq, FK_F32, FK_CPU, 4, sq);
  fk_tensor_init(&p->tdk, p->dk, FK_F32, FK_CPU, 4, sk);
  fk_tensor_init(&p->tdv, p->dv, FK_F32, FK_CPU, 4, sk);
}

/* ||a - b|| / ||b||; NaN anywhere gives +inf. */
static double rel_error(const float* a, const float* b, int n) {
  double num = 0, den = 0;
  int i;
  for (i = 0; i < n; ++i) {
    double x = a[i], y = b[i];
    if (isnan(x) || isnan(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den == 0 ? sqrt(num) : sqrt(num / den);
}

static fk_status forward(problem* p, const fk_attention_options* opts, fk_cost* cost) {
  return fk_attention_forward(&p->tq, &p->tk, &p->tv, &p->to, &p->tlse, opts, cost);
}
static fk_status backward(problem* p, const fk_attention_options* opts, fk_cost* cost) {
  return fk_attention_backward(&p->tdout, &p->tq, &p->tk, &p->tv, &p->to, &p->tlse, &p->tdq, &p->tdk, &p->tdv, opts,
                               cost);
}

static void test_options_init(void) {
  fk_attention_options o;
  memset(&o, 0x5a, sizeof(o));
  CHECK(fk_attention_options_init(&o) == FK_OK, "%s", fk_last_error());
  CHECK(o.scale == 0.0f, "scale %g", (double)o.scale);
  CHECK(o.causal == 0, "causal %d", (int)o.causal);
  CHECK(o.window_left == -1, "window_left %lld", (long long)o.window_left);
  CHECK(o.window_right == -1, "window_right %lld", (long long)o.window_right);
  CHECK(o.softcap == 0.0f, "softcap %g", (double)o.softcap);
  CHECK(o.cu_seqlens_q == NULL && o.cu_seqlens_k == NULL, "cu_seqlens not NULL");
  CHECK(o.num_seqs == 0, "num_seqs %lld", (long long)o.num_seqs);
  CHECK(o.impl == FK_IMPL_AUTO, "impl %d", (int)o.impl);
  CHECK(o.check_finite == 1, "check_finite %d", (int)o.check_finite);
  CHECK_STATUS(fk_attention_options_init(NULL), FK_INVALID_ARGUMENT, "opts");
}

static void test_tensor_init(void) {
  fk_tensor t;
  float buf[1];
  const int64_t shape[4] = {2, 3, 4, 5};
  memset(&t, 0x5a, sizeof(t));
  CHECK(fk_tensor_init(&t, buf, FK_BF16, FK_CPU, 4, shape) == FK_OK, "%s", fk_last_error());
  CHECK(t.data == buf, "data");
  CHECK(t.dtype == FK_BF16 && t.device == FK_CPU && t.device_index == 0 && t.ndim == 4, "fields");
  CHECK(t.shape[0] == 2 && t.shape[1] == 3 && t.shape[2] == 4 && t.shape[3] == 5, "shape");
  CHECK(t.strides[0] == 60 && t.strides[1] == 20 && t.strides[2] == 5 && t.strides[3] == 1,
        "strides %lld %lld %lld %lld", (long long)t.strides[0], (long long)t.strides[1], (long long)t.strides[2],
        (long long)t.strides[3]);
  CHECK(fk_tensor_init(&t, buf, FK_F32, FK_CPU, 2, shape) == FK_OK, "%s", fk_last_error());
  CHECK(t.ndim == 2 && t.strides[0] == 3 && t.strides[1] == 1 && t.shape[2] == 0 && t.strides[2] == 0,
        "2-d tensor: unused dims zeroed");
  CHECK(fk_tensor_init(&t, NULL, FK_F32, FK_CPU, 0, NULL) == FK_OK, "0-d with NULL shape: %s", fk_last_error());
  CHECK_STATUS(fk_tensor_init(NULL, buf, FK_F32, FK_CPU, 4, shape), FK_INVALID_ARGUMENT, "t:");
  CHECK_STATUS(fk_tensor_init(&t, buf, FK_F32, FK_CPU, 5, shape), FK_INVALID_ARGUMENT, "ndim");
  CHECK_STATUS(fk_tensor_init(&t, buf, FK_F32, FK_CPU, -1, shape), FK_INVALID_ARGUMENT, "ndim");
  CHECK_STATUS(fk_tensor_init(&t, buf, FK_F32, FK_CPU, 3, NULL), FK_INVALID_ARGUMENT, "shape");
}

/* Forward + backward with flash and with the reference; they must agree. */
static void test_flash_matches_reference(void) {
  static problem ref, fl;
  fk_attention_options opts;
  fk_cost cost;
  int causal;
  for (causal = 0; causal <= 1; ++causal) {
    g_rng = 777u + (unsigned long)causal;
    problem_init(&ref);
    g_rng = 777u + (unsigned long)causal;
    problem_init(&fl); /* same inputs: same seed */
    fk_attention_options_init(&opts);
    opts.causal = causal;

    opts.impl = FK_IMPL_REFERENCE;
    CHECK(forward(&ref, &opts, NULL) == FK_OK, "reference forward: %s", fk_last_error());
    CHECK(backward(&ref, &opts, NULL) == FK_OK, "reference backward: %s", fk_last_error());

    opts.impl = FK_IMPL_FLASH;
    memset(&cost, 0, sizeof(cost));
    CHECK(forward(&fl, &opts, &cost) == FK_OK, "flash forward: %s", fk_last_error());
    CHECK(strcmp(fk_last_error(), "") == 0, "last error cleared after success: '%s'", fk_last_error());
    CHECK(cost.flops > 0, "forward flops %g", cost.flops);
    CHECK(cost.bytes_read > 0 && cost.bytes_written > 0, "forward bytes %g %g", cost.bytes_read, cost.bytes_written);
    CHECK(cost.kernel[0] != 0 && strstr(cost.kernel, "flash") != NULL, "forward kernel '%s'", cost.kernel);
    CHECK(cost.model[0] != 0, "forward model empty");
    memset(&cost, 0, sizeof(cost));
    CHECK(backward(&fl, &opts, &cost) == FK_OK, "flash backward: %s", fk_last_error());
    CHECK(cost.flops > 0, "backward flops %g", cost.flops);
    CHECK(cost.kernel[0] != 0, "backward kernel empty");

    {
      const double eo = rel_error(fl.o, ref.o, NQ), el = rel_error(fl.lse, ref.lse, NL);
      const double eq = rel_error(fl.dq, ref.dq, NQ), ek = rel_error(fl.dk, ref.dk, NK),
                   ev = rel_error(fl.dv, ref.dv, NK);
      CHECK(eo < 1e-5, "causal=%d o rel error %g", causal, eo);
      CHECK(el < 1e-5, "causal=%d lse rel error %g", causal, el);
      CHECK(eq < 1e-4, "causal=%d dq rel error %g", causal, eq);
      CHECK(ek < 1e-4, "causal=%d dk rel error %g", causal, ek);
      CHECK(ev < 1e-4, "causal=%d dv rel error %g", causal, ev);
    }
  }
  /* NULL opts: the defaults (impl auto, i.e. flash); same result as explicit defaults. */
  {
    static problem dflt;
    g_rng = 777u;
    problem_init(&dflt);
    memset(&cost, 0, sizeof(cost));
    CHECK(forward(&dflt, NULL, &cost) == FK_OK, "forward, NULL opts: %s", fk_last_error());
    CHECK(cost.flops > 0 && cost.kernel[0] != 0, "cost with NULL opts");
    CHECK(backward(&dflt, NULL, NULL) == FK_OK, "backward, NULL opts, NULL cost: %s", fk_last_error());
    g_rng = 777u;
    problem_init(&ref);
    fk_attention_options_init(&opts);
    opts.impl = FK_IMPL_REFERENCE;
    forward(&ref, &opts, NULL);
    backward(&ref, &opts, NULL);
    CHECK(rel_error(dflt.o, ref.o, NQ) < 1e-5, "NULL opts o differs from reference");
    CHECK(rel_error(dflt.dq, ref.dq, NQ) < 1e-4, "NULL opts dq differs from reference");
  }
}

static void test_null_tensors(void) {
  static problem p;
  fk_attention_options opts;
  fk_tensor saved;
  g_rng = 99u;
  problem_init(&p);
  fk_attention_options_init(&opts);
  CHECK(forward(&p, &opts, NULL) == FK_OK, "%s", fk_last_error()); /* o, lse for the backward */

  /* NULL descriptors */
  CHECK_STATUS(fk_attention_forward(NULL, &p.tk, &p.tv, &p.to, &p.tlse, &opts, NULL), FK_INVALID_ARGUMENT, "q:");
  CHECK_STATUS(fk_attention_forward(&p.tq, NULL, &p.tv, &p.to, &p.tlse, &opts, NULL), FK_INVALID_ARGUMENT, "k:");
  CHECK_STATUS(fk_attention_forward(&p.tq, &p.tk, NULL, &p.to, &p.tlse, &opts, NULL), FK_INVALID_ARGUMENT, "v:");
  CHECK_STATUS(fk_attention_forward(&p.tq, &p.tk, &p.tv, NULL, &p.tlse, &opts, NULL), FK_INVALID_ARGUMENT, "o:");
  CHECK_STATUS(fk_attention_forward(&p.tq, &p.tk, &p.tv, &p.to, NULL, &opts, NULL), FK_INVALID_ARGUMENT, "lse:");
  CHECK_STATUS(fk_attention_backward(NULL, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdq, &p.tdk, &p.tdv, &opts, NULL),
               FK_INVALID_ARGUMENT, "dout:");
  CHECK_STATUS(fk_attention_backward(&p.tdout, NULL, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdq, &p.tdk, &p.tdv, &opts, NULL),
               FK_INVALID_ARGUMENT, "q:");
  CHECK_STATUS(fk_attention_backward(&p.tdout, &p.tq, NULL, &p.tv, &p.to, &p.tlse, &p.tdq, &p.tdk, &p.tdv, &opts, NULL),
               FK_INVALID_ARGUMENT, "k:");
  CHECK_STATUS(fk_attention_backward(&p.tdout, &p.tq, &p.tk, NULL, &p.to, &p.tlse, &p.tdq, &p.tdk, &p.tdv, &opts, NULL),
               FK_INVALID_ARGUMENT, "v:");
  CHECK_STATUS(fk_attention_backward(&p.tdout, &p.tq, &p.tk, &p.tv, NULL, &p.tlse, &p.tdq, &p.tdk, &p.tdv, &opts, NULL),
               FK_INVALID_ARGUMENT, "o:");
  CHECK_STATUS(fk_attention_backward(&p.tdout, &p.tq, &p.tk, &p.tv, &p.to, NULL, &p.tdq, &p.tdk, &p.tdv, &opts, NULL),
               FK_INVALID_ARGUMENT, "lse:");
  CHECK_STATUS(fk_attention_backward(&p.tdout, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, NULL, &p.tdk, &p.tdv, &opts, NULL),
               FK_INVALID_ARGUMENT, "dq:");
  CHECK_STATUS(fk_attention_backward(&p.tdout, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdq, NULL, &p.tdv, &opts, NULL),
               FK_INVALID_ARGUMENT, "dk:");
  CHECK_STATUS(fk_attention_backward(&p.tdout, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdq, &p.tdk, NULL, &opts, NULL),
               FK_INVALID_ARGUMENT, "dv:");

  /* NULL data pointers inside valid descriptors */
#define NULL_DATA(field, call, name)                        \
  do {                                                      \
    saved = p.field;                                        \
    p.field.data = NULL;                                    \
    CHECK_STATUS(call, FK_INVALID_ARGUMENT, name ": data"); \
    p.field = saved;                                        \
  } while (0)
  NULL_DATA(tq, forward(&p, &opts, NULL), "q");
  NULL_DATA(tk, forward(&p, &opts, NULL), "k");
  NULL_DATA(tv, forward(&p, &opts, NULL), "v");
  NULL_DATA(to, forward(&p, &opts, NULL), "o");
  NULL_DATA(tlse, forward(&p, &opts, NULL), "lse");
  NULL_DATA(tdout, backward(&p, &opts, NULL), "dout");
  NULL_DATA(tdq, backward(&p, &opts, NULL), "dq");
  NULL_DATA(tdk, backward(&p, &opts, NULL), "dk");
  NULL_DATA(tdv, backward(&p, &opts, NULL), "dv");
#undef NULL_DATA
  /* Everything restored: the calls succeed again. */
  CHECK(forward(&p, &opts, NULL) == FK_OK, "%s", fk_last_error());
  CHECK(backward(&p, &opts, NULL) == FK_OK, "%s", fk_last_error());
}

static void test_bad_codes(void) {
  static problem p;
  fk_attention_options opts;
  fk_tensor saved;
  g_rng = 5u;
  problem_init(&p);
  fk_attention_options_init(&opts);

  opts.impl = 4;
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "impl");
  CHECK_STATUS(backward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "impl");
  opts.impl = -1;
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "impl");
  fk_attention_options_init(&opts);

  saved = p.tk;
  p.tk.dtype = 9;
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "k: unknown dtype");
  p.tk.dtype = -1;
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "k: unknown dtype");
  p.tk = saved;
  saved = p.tq;
  p.tq.dtype = 42;
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "q: unknown dtype");
  p.tq = saved;

  saved = p.tv;
  p.tv.device = 7;
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "v: unknown device");
  p.tv = saved;

  saved = p.to;
  p.to.ndim = 5;
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "o: ndim");
  p.to = saved;

  /* Errors from the library's own validation come through with their status and message. */
  opts.scale = -1.0f;
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "scale");
  fk_attention_options_init(&opts);
  opts.impl = FK_IMPL_FLASH;
  p.q[3] = NAN;
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "non-finite");
  opts.check_finite = 0;
  CHECK(forward(&p, &opts, NULL) == FK_OK, "check_finite=0: %s", fk_last_error());
  p.q[3] = 0.5f;
  if (fk_cuda_device_count() == 0) {
    fk_attention_options_init(&opts);
    p.tq.device = FK_CUDA;
    CHECK_STATUS(forward(&p, &opts, NULL), FK_UNSUPPORTED, "CUDA");
    p.tq.device = FK_CPU;
  }
}

static void test_threads(void) {
  const int32_t before = fk_num_threads();
  CHECK(before >= 1, "num_threads %d", (int)before);
  CHECK_STATUS(fk_set_num_threads(0), FK_INVALID_ARGUMENT, "num_threads");
  CHECK_STATUS(fk_set_num_threads(-2), FK_INVALID_ARGUMENT, "num_threads");
  CHECK(fk_num_threads() == before, "a refused value changed the setting to %d", (int)fk_num_threads());
  CHECK(fk_set_num_threads(1) == FK_OK, "%s", fk_last_error());
  CHECK(fk_num_threads() == 1, "num_threads %d after set 1", (int)fk_num_threads());
  CHECK(fk_set_num_threads(before) == FK_OK, "%s", fk_last_error());
  /* The bound every front end shares: 100000 threads once crashed inside the OpenMP runtime. */
  CHECK(fk_max_threads() >= 1 && fk_max_threads() <= 1024, "max_threads %d", (int)fk_max_threads());
  CHECK_STATUS(fk_set_num_threads(100000), FK_INVALID_ARGUMENT, "num_threads: expected 1..");
  CHECK_STATUS(fk_set_num_threads(fk_max_threads() + 1), FK_INVALID_ARGUMENT, "got");
  CHECK(fk_set_num_threads(fk_max_threads()) == FK_OK, "%s", fk_last_error());
  CHECK(fk_set_num_threads(before) == FK_OK, "%s", fk_last_error());
}

/* A shape mismatch between q and another operand names both: the message starts with the operand whose shape was
 * checked and says the expected sizes come from q (once it blamed o alone when q's shape was the wrong one). */
static void test_shape_mismatch_names_q(void) {
  static problem p;
  fk_attention_options opts;
  const int64_t wrong_q[4] = {B, SQ, H / 2, D};
  g_rng = 5u;
  problem_init(&p);
  fk_attention_options_init(&opts);
  fk_tensor_init(&p.tq, p.q, FK_F32, FK_CPU, 4, wrong_q); /* q has half the heads of o */
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "o: expected shape");
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "come from q, shape [");
  CHECK_STATUS(forward(&p, &opts, NULL), FK_INVALID_ARGUMENT, "if q is the wrong one, fix q");
}

static void test_info(void) {
  const char* v = fk_version();
  const char* isa = fk_cpu_isa();
  CHECK(v != NULL && v[0] != 0, "version empty");
  CHECK(isa != NULL && (strcmp(isa, "scalar") == 0 || strcmp(isa, "avx2") == 0 || strcmp(isa, "avx512") == 0),
        "cpu isa '%s'", isa ? isa : "(null)");
  CHECK(fk_cuda_device_count() >= 0, "cuda device count");
  CHECK(strcmp(fk_status_name(FK_OK), "ok") == 0, "%s", fk_status_name(FK_OK));
  CHECK(strcmp(fk_status_name(FK_INVALID_ARGUMENT), "invalid argument") == 0, "%s", fk_status_name(FK_INVALID_ARGUMENT));
  CHECK(strcmp(fk_status_name(FK_UNSUPPORTED), "unsupported") == 0, "%s", fk_status_name(FK_UNSUPPORTED));
  CHECK(strcmp(fk_status_name(FK_OUT_OF_MEMORY), "out of memory") == 0, "%s", fk_status_name(FK_OUT_OF_MEMORY));
  CHECK(strcmp(fk_status_name(FK_DEVICE_ERROR), "device error") == 0, "%s", fk_status_name(FK_DEVICE_ERROR));
  CHECK(strcmp(fk_status_name(FK_INTERNAL), "internal error") == 0, "%s", fk_status_name(FK_INTERNAL));
  CHECK(strcmp(fk_status_name((fk_status)99), "unknown status") == 0, "%s", fk_status_name((fk_status)99));
}

/* The fp8 forward on the CPU: inputs quantized by fk_quantize_e4m3, flash vs the reference, and its bad input. */
static void test_fp8(void) {
  static problem p;
  static unsigned char q8[NQ], k8[NK], v8[NK];
  static unsigned short o_fl[NQ], o_ref[NQ];
  static float lse_fl[NL], lse_ref[NL];
  const int64_t sq[4] = {B, SQ, H, D}, sk[4] = {B, SK, HKV, D}, sl[3] = {B, H, SQ};
  fk_tensor tq8, tk8, tv8, to_fl, to_ref, tl_fl, tl_ref;
  fk_fp8_scales s;
  fk_attention_options opts;
  fk_cost cost;
  double num = 0, den = 0;
  int i;
  g_rng = 4242u;
  problem_init(&p);
  fk_tensor_init(&tq8, q8, FK_E4M3, FK_CPU, 4, sq);
  fk_tensor_init(&tk8, k8, FK_E4M3, FK_CPU, 4, sk);
  fk_tensor_init(&tv8, v8, FK_E4M3, FK_CPU, 4, sk);
  fk_tensor_init(&to_fl, o_fl, FK_BF16, FK_CPU, 4, sq);
  fk_tensor_init(&to_ref, o_ref, FK_BF16, FK_CPU, 4, sq);
  fk_tensor_init(&tl_fl, lse_fl, FK_F32, FK_CPU, 3, sl);
  fk_tensor_init(&tl_ref, lse_ref, FK_F32, FK_CPU, 3, sl);
  CHECK(fk_quantize_e4m3(&p.tq, &tq8, &s.q_descale) == FK_OK, "quantize q: %s", fk_last_error());
  CHECK(fk_quantize_e4m3(&p.tk, &tk8, &s.k_descale) == FK_OK, "quantize k: %s", fk_last_error());
  CHECK(fk_quantize_e4m3(&p.tv, &tv8, &s.v_descale) == FK_OK, "quantize v: %s", fk_last_error());
  CHECK(s.q_descale > 0 && s.q_descale < 1.0f / 448 * 1.01f, "q descale %g (inputs in [-1, 1))", s.q_descale);
  memset(o_fl, 0xff, sizeof(o_fl));
  memset(o_ref, 0xff, sizeof(o_ref));
  fk_attention_options_init(&opts);
  opts.causal = 1;
  memset(&cost, 0, sizeof(cost));
  CHECK(fk_attention_forward_fp8(&tq8, &tk8, &tv8, &to_fl, &tl_fl, &s, &opts, &cost) == FK_OK, "fp8 forward: %s",
        fk_last_error());
  CHECK(strstr(cost.kernel, "fp8") != NULL && cost.flops > 0, "fp8 cost kernel '%s' flops %g", cost.kernel, cost.flops);
  opts.impl = FK_IMPL_REFERENCE;
  CHECK(fk_attention_forward_fp8(&tq8, &tk8, &tv8, &to_ref, &tl_ref, &s, &opts, NULL) == FK_OK,
        "fp8 reference forward: %s", fk_last_error());
  for (i = 0; i < NQ; ++i) { /* bf16 is the top half of an f32 */
    unsigned int ua = (unsigned int)o_fl[i] << 16, ub = (unsigned int)o_ref[i] << 16;
    float a, b;
    memcpy(&a, &ua, 4);
    memcpy(&b, &ub, 4);
    num += (double)(a - b) * (a - b);
    den += (double)b * b;
  }
  CHECK(den > 0 && sqrt(num / den) < 1e-2, "fp8 flash vs reference o rel error %g", den > 0 ? sqrt(num / den) : -1.0);
  CHECK(rel_error(lse_fl, lse_ref, NL) < 1e-5, "fp8 lse rel error %g", rel_error(lse_fl, lse_ref, NL));
  CHECK_STATUS(fk_attention_forward_fp8(&tq8, &tk8, &tv8, &to_fl, &tl_fl, NULL, &opts, NULL), FK_INVALID_ARGUMENT,
               "scales");
  s.k_descale = 0;
  CHECK_STATUS(fk_attention_forward_fp8(&tq8, &tk8, &tv8, &to_fl, &tl_fl, &s, &opts, NULL), FK_INVALID_ARGUMENT,
               "scales.k_descale");
  s.k_descale = 1;
  CHECK_STATUS(fk_attention_forward_fp8(&p.tq, &tk8, &tv8, &to_fl, &tl_fl, &s, &opts, NULL), FK_INVALID_ARGUMENT,
               "q: dtype must be e4m3");
  CHECK_STATUS(fk_attention_forward(&tq8, &tk8, &tv8, &to_fl, &tl_fl, &opts, NULL), FK_INVALID_ARGUMENT,
               "supported only by attention_forward_fp8");
  CHECK_STATUS(fk_quantize_e4m3(&p.tq, &p.to, &s.q_descale), FK_INVALID_ARGUMENT, "dst: dtype must be e4m3");
}

int main(void) {
  test_options_init();
  test_tensor_init();
  test_flash_matches_reference();
  test_null_tensors();
  test_bad_codes();
  test_threads();
  test_shape_mismatch_names_q();
  test_info();
  test_fp8();
  printf("flashkit C API: %d checks, %d failures (version %s, isa %s)\n", g_checks, g_failures, fk_version(),
         fk_cpu_isa());
  return g_failures == 0 ? 0 : 1;
}
