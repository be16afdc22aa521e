/* The C API of the tokenizer and the model engine, from plain C99: greedy generation on tests/data/models/tiny-llama
 * equals transformers' (expected.json), last-row logits, sessions (all prefill rows and decode steps vs
 * transformers' logits, decode vs a fresh prefill, chunked and interleaved sessions, the context limit), the
 * tokenizer's two-call buffers and round trip, and bad input of every kind: a non-ok status and a message naming
 * the argument. The data directory is argv[1], else the
 * compile definition FLASHKIT_TEST_DATA. Prints each failure and a summary line; returns non-zero on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashkit/flashkit.h"

#include "check.h"
#define BAD(call, part) CHECK_STATUS(call, FK_INVALID_ARGUMENT, part)

/* tests/data/models/tiny-llama/expected.json: prompt_ids and the first 16 greedy_ids (transformers, f32). */
static const int32_t kPrompt[40] = {1,   450, 319, 352, 499, 278, 205, 8,   26,  508, 468, 143, 185, 55,
                                    270, 303, 408, 500, 409, 73,  399, 469, 384, 474, 163, 371, 447, 311,
                                    407, 199, 145, 66,  225, 385, 416, 414, 293, 11,  125, 444};
static const int32_t kGreedy[16] = {210, 17, 150, 210, 17, 150, 26, 210, 17, 150, 26, 210, 17, 150, 26, 210};
enum { NP = 40, VOCAB = 512 };

static char g_data[4096];

static void path(char* out, size_t cap, const char* rel) { snprintf(out, cap, "%s/%s", g_data, rel); }

/* Reads row `row` of a [rows, VOCAB] f32 file into out; 0 on success. */
static int read_row(const char* file, int row, float* out) {
  FILE* f = fopen(file, "rb");
  size_t got;
  if (!f) return -1;
  if (fseek(f, (long)row * VOCAB * (long)sizeof(float), SEEK_SET) != 0) {
    fclose(f);
    return -1;
  }
  got = fread(out, sizeof(float), VOCAB, f);
  fclose(f);
  return got == VOCAB ? 0 : -1;
}

static void test_model(void) {
  char dir[4200], file[4300];
  fk_model* m = NULL;
  int64_t vocab = 0;
  int32_t out[64];
  size_t n = 0;
  float logits[VOCAB], want[VOCAB];
  int i;
  path(dir, sizeof dir, "models/tiny-llama");
  CHECK(fk_model_load(dir, "cpu", "f32", 0, &m) == FK_OK, "load %s: %s", dir, fk_last_error());
  if (!m) return;
  CHECK(fk_last_error()[0] == 0, "message after success: '%s'", fk_last_error());
  CHECK(fk_model_vocab_size(m, &vocab) == FK_OK && vocab == VOCAB, "vocab %lld: %s", (long long)vocab, fk_last_error());

  /* Greedy: the first 16 ids equal transformers'. */
  CHECK(fk_generate(m, kPrompt, NP, 16, 0.0f, 0, 1.0f, 0, out, 64, &n) == FK_OK, "generate: %s", fk_last_error());
  CHECK(n == 16, "n_out %zu", n);
  for (i = 0; i < 16 && i < (int)n; ++i) CHECK(out[i] == kGreedy[i], "greedy id %d: got %d, want %d", i, out[i], kGreedy[i]);
  /* Sampling with a seed is reproducible. */
  {
    int32_t a[8], b[8];
    size_t na = 0, nb = 0;
    CHECK(fk_generate(m, kPrompt, NP, 8, 0.8f, 40, 0.95f, 7, a, 8, &na) == FK_OK, "sample: %s", fk_last_error());
    CHECK(fk_generate(m, kPrompt, NP, 8, 0.8f, 40, 0.95f, 7, b, 8, &nb) == FK_OK, "sample: %s", fk_last_error());
    CHECK(na == nb && na > 0 && memcmp(a, b, na * sizeof(int32_t)) == 0, "same seed, different ids");
  }

  /* Last-row prefill logits vs transformers'. */
  CHECK(fk_model_logits(m, kPrompt, NP, logits, VOCAB) == FK_OK, "logits: %s", fk_last_error());
  path(file, sizeof file, "models/tiny-llama/expected_prefill_logits.f32");
  CHECK(read_row(file, NP - 1, want) == 0, "read %s", file);
  {
    double num = 0, den = 0;
    for (i = 0; i < VOCAB; ++i) {
      num += (logits[i] - want[i]) * (double)(logits[i] - want[i]);
      den += want[i] * (double)want[i];
    }
    CHECK(sqrt(num / (den > 0 ? den : 1)) < 1e-3, "logits rel err %g", sqrt(num / (den > 0 ? den : 1)));
  }

  /* Bad input. */
  BAD(fk_model_vocab_size(NULL, &vocab), "model");
  BAD(fk_model_vocab_size(m, NULL), "out");
  BAD(fk_generate(NULL, kPrompt, NP, 4, 0, 0, 1, 0, out, 64, &n), "model");
  BAD(fk_generate(m, NULL, NP, 4, 0, 0, 1, 0, out, 64, &n), "prompt");
  BAD(fk_generate(m, kPrompt, 0, 4, 0, 0, 1, 0, out, 64, &n), "n_prompt");
  BAD(fk_generate(m, kPrompt, NP, 4, 0, 0, 1, 0, NULL, 64, &n), "out_ids");
  BAD(fk_generate(m, kPrompt, NP, 4, 0, 0, 1, 0, out, 64, NULL), "n_out");
  BAD(fk_generate(m, kPrompt, NP, 0, 0, 0, 1, 0, out, 64, &n), "max_new_tokens");
  BAD(fk_generate(m, kPrompt, NP, -3, 0, 0, 1, 0, out, 64, &n), "max_new_tokens");
  BAD(fk_generate(m, kPrompt, NP, 4, -1.0f, 0, 1, 0, out, 64, &n), "temperature");
  BAD(fk_generate(m, kPrompt, NP, 4, NAN, 0, 1, 0, out, 64, &n), "temperature");
  BAD(fk_generate(m, kPrompt, NP, 4, 0, -1, 1, 0, out, 64, &n), "top_k");
  BAD(fk_generate(m, kPrompt, NP, 4, 0, 0, 0.0f, 0, out, 64, &n), "top_p");
  BAD(fk_generate(m, kPrompt, NP, 4, 0, 0, 1.5f, 0, out, 64, &n), "top_p");
  {
    int32_t oov[3] = {1, VOCAB, 5}, neg[2] = {1, -1};
    BAD(fk_generate(m, oov, 3, 4, 0, 0, 1, 0, out, 64, &n), "prompt[1]");
    BAD(fk_generate(m, neg, 2, 4, 0, 0, 1, 0, out, 64, &n), "prompt[1]");
    BAD(fk_model_logits(m, oov, 3, logits, VOCAB), "prompt[1]");
  }
  n = 0;
  BAD(fk_generate(m, kPrompt, NP, 16, 0, 0, 1, 0, out, 8, &n), "cap");
  CHECK(n == 16, "needed count in *n_out: %zu", n);
  /* The context bounds the output buffer, not max_new_tokens (a caller need not reserve 2^31 ids). */
  {
    int64_t ctx = 0;
    CHECK(fk_model_max_context(m, &ctx) == FK_OK && ctx == 4096, "max_context %lld: %s", (long long)ctx, fk_last_error());
    BAD(fk_model_max_context(NULL, &ctx), "model");
    n = 0;
    BAD(fk_generate(m, kPrompt, NP, 2147483647, 0, 0, 1, 0, out, 8, &n), "max_context 4096 - n_prompt + 1");
    CHECK(n == (size_t)(4096 - NP + 1), "needed count in *n_out: %zu", n);
  }
  BAD(fk_model_logits(NULL, kPrompt, NP, logits, VOCAB), "model");
  BAD(fk_model_logits(m, NULL, NP, logits, VOCAB), "prompt");
  BAD(fk_model_logits(m, kPrompt, 0, logits, VOCAB), "n");
  BAD(fk_model_logits(m, kPrompt, NP, NULL, VOCAB), "out_last_logits");
  BAD(fk_model_logits(m, kPrompt, NP, logits, VOCAB - 1), "cap");
  /* The handle still works after all that. */
  CHECK(fk_generate(m, kPrompt, NP, 3, 0.0f, 0, 1.0f, 0, out, 64, &n) == FK_OK && n == 3 && out[0] == kGreedy[0],
        "generate after errors: %s", fk_last_error());
  fk_model_free(m);
  fk_model_free(NULL);
}

/* ---- streaming ------------------------------------------------------------------------------------------- */

typedef struct {
  int32_t ids[64];
  int n, stop_after; /* the callback returns 0 (stop) once it has seen stop_after ids */
} Collected;

static int collect(void* user, int32_t id) {
  Collected* c = (Collected*)user;
  if (c->n < 64) c->ids[c->n] = id;
  ++c->n;
  return c->n < c->stop_after;
}

/* fk_generate_stream hands over the ids fk_generate returns, in order; a 0 from the callback stops generation after
 * that id; bad arguments are rejected before any callback. fk_sampling_defaults_init: the CLI's defaults. */
static void test_stream(void) {
  char dir[4200];
  fk_model* m = NULL;
  Collected c;
  size_t n = 99;
  int i;
  fk_sampling_defaults d;
  path(dir, sizeof dir, "models/tiny-llama");
  CHECK(fk_model_load(dir, "cpu", "f32", 0, &m) == FK_OK, "load %s: %s", dir, fk_last_error());
  if (!m) return;
  memset(&c, 0, sizeof c);
  c.stop_after = 1000;
  CHECK(fk_generate_stream(m, kPrompt, NP, 16, 0.0f, 0, 1.0f, 0, collect, &c, &n) == FK_OK, "stream: %s",
        fk_last_error());
  CHECK(n == 16 && c.n == 16, "streamed %zu ids, callback saw %d", n, c.n);
  for (i = 0; i < 16 && i < c.n; ++i) CHECK(c.ids[i] == kGreedy[i], "streamed id %d: %d, want %d", i, c.ids[i], kGreedy[i]);
  memset(&c, 0, sizeof c);
  c.stop_after = 3;
  CHECK(fk_generate_stream(m, kPrompt, NP, 16, 0.0f, 0, 1.0f, 0, collect, &c, &n) == FK_OK && n == 3 && c.n == 3,
        "callback stop: n %zu, seen %d: %s", n, c.n, fk_last_error());
  memset(&c, 0, sizeof c);
  c.stop_after = 1000;
  BAD(fk_generate_stream(m, kPrompt, NP, 4, 0, 0, 1, 0, NULL, &c, &n), "on_token");
  BAD(fk_generate_stream(NULL, kPrompt, NP, 4, 0, 0, 1, 0, collect, &c, &n), "model");
  BAD(fk_generate_stream(m, kPrompt, 0, 4, 0, 0, 1, 0, collect, &c, &n), "n_prompt");
  BAD(fk_generate_stream(m, kPrompt, NP, 0, 0, 0, 1, 0, collect, &c, &n), "max_new_tokens");
  BAD(fk_generate_stream(m, kPrompt, NP, 4, 0, 0, 1.5f, 0, collect, &c, &n), "top_p");
  BAD(fk_generate_stream(m, kPrompt, NP, 4, 0, 0, 1, 0, collect, &c, NULL), "n_out");
  CHECK(c.n == 0, "the callback ran %d times for rejected calls", c.n);
  fk_model_free(m);
  fk_sampling_defaults_init(&d);
  CHECK(d.max_new_tokens == 128 && d.temperature == 0.8f && d.top_k == 40 && d.top_p == 0.95f && d.min_p == 0.0f &&
            d.repetition_penalty == 1.0f && d.seed == 0,
        "sampling defaults %d %g %d %g", d.max_new_tokens, d.temperature, d.top_k, d.top_p);
  fk_sampling_defaults_init(NULL);
}

/* ---- sessions ---------------------------------------------------------------------------------------------- */

enum { MAX_IDS = 128, FEED = 16 };

/* The ints of `"key": [ ... ]` in a JSON file (expected.json); returns how many (at most cap), -1 on failure. */
static int read_json_ids(const char* file, const char* key, int32_t* out, int cap) {
  static char buf[1 << 16];
  char pat[64];
  const char* p;
  char* end;
  size_t got;
  int n = 0;
  FILE* f = fopen(file, "rb");
  if (!f) return -1;
  got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[got] = 0;
  snprintf(pat, sizeof pat, "\"%s\"", key);
  p = strstr(buf, pat);
  if (!p || !(p = strchr(p, '['))) return -1;
  ++p;
  while (n < cap) {
    long v;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t' || *p == ',') ++p;
    if (*p == ']') return n;
    v = strtol(p, &end, 10);
    if (end == p) return -1;
    out[n++] = (int32_t)v;
    p = end;
  }
  return n;
}

/* ||a - b|| / ||b|| over n floats. */
static double rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  size_t i;
  for (i = 0; i < n; ++i) {
    num += (a[i] - (double)b[i]) * (a[i] - (double)b[i]);
    den += b[i] * (double)b[i];
  }
  return sqrt(num / (den > 0 ? den : 1));
}

static void poison(float* x, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) x[i] = NAN;
}

static int64_t position_of(const fk_session* s) {
  int64_t p = -1;
  if (fk_session_position(s, &p) != FK_OK) return -1;
  return p;
}

/* All prefill rows and FEED decode steps (teacher-forced on transformers' greedy ids) against the fixture's stored
 * transformers logits (1e-3, as above); each decode row against a fresh fk_model_logits prefill of the same ids
 * (1e-5); last-row-only prefill, a prefill in two parts and reset against the one-shot rows. */
static void test_session_fidelity(const char* fixture) {
  char dir[4200], file[4300];
  int32_t prompt[MAX_IDS], greedy[MAX_IDS], ids[MAX_IDS];
  static float all[MAX_IDS * VOCAB], part[MAX_IDS * VOCAB];
  float row[VOCAB], fresh[VOCAB], want[VOCAB];
  int np_, ng, i;
  double worst_pre = 0, worst_dec_ref = 0, worst_dec_fresh = 0;
  fk_model* m = NULL;
  fk_session* s = NULL;
  int64_t ctx = 0;
  snprintf(file, sizeof file, "%s/models/%s/expected.json", g_data, fixture);
  np_ = read_json_ids(file, "prompt_ids", prompt, MAX_IDS);
  ng = read_json_ids(file, "greedy_ids", greedy, MAX_IDS);
  CHECK(np_ == NP && ng >= FEED, "%s: prompt %d, greedy %d ids", file, np_, ng);
  if (np_ != NP || ng < FEED) return;
  snprintf(dir, sizeof dir, "%s/models/%s", g_data, fixture);
  CHECK(fk_model_load(dir, "cpu", "f32", 0, &m) == FK_OK, "load %s: %s", dir, fk_last_error());
  if (!m) return;
  CHECK(fk_session_new(m, &s) == FK_OK && s != NULL, "session_new: %s", fk_last_error());
  if (!s) {
    fk_model_free(m);
    return;
  }
  CHECK(position_of(s) == 0, "%s: new session at position %lld", fixture, (long long)position_of(s));
  CHECK(fk_session_max_context(s, &ctx) == FK_OK && ctx == 4096, "%s: max_context %lld: %s", fixture,
        (long long)ctx, fk_last_error());

  /* Every prefill row vs transformers. */
  poison(all, NP * VOCAB);
  CHECK(fk_session_prefill(s, prompt, NP, 1, all, NP * VOCAB) == FK_OK, "%s: prefill all: %s", fixture,
        fk_last_error());
  CHECK(position_of(s) == NP, "%s: position after prefill %lld", fixture, (long long)position_of(s));
  snprintf(file, sizeof file, "%s/models/%s/expected_prefill_logits.f32", g_data, fixture);
  for (i = 0; i < NP; ++i) {
    double e;
    CHECK(read_row(file, i, want) == 0, "read %s row %d", file, i);
    e = rel_err(all + (size_t)i * VOCAB, want, VOCAB);
    if (e != e || e > worst_pre) worst_pre = e; /* NaN sticks */
  }
  CHECK(worst_pre < 1e-3, "%s: prefill rows vs transformers: max rel err %g", fixture, worst_pre);
  /* The last row is fk_model_logits' row. */
  CHECK(fk_model_logits(m, prompt, NP, fresh, VOCAB) == FK_OK, "logits: %s", fk_last_error());
  CHECK(rel_err(all + (size_t)(NP - 1) * VOCAB, fresh, VOCAB) < 1e-5, "%s: last prefill row vs fk_model_logits %g",
        fixture, rel_err(all + (size_t)(NP - 1) * VOCAB, fresh, VOCAB));

  /* Decode steps vs transformers' decode logits and vs a fresh prefill of prompt + fed ids. */
  snprintf(file, sizeof file, "%s/models/%s/expected_decode_logits.f32", g_data, fixture);
  memcpy(ids, prompt, sizeof(int32_t) * NP);
  for (i = 0; i < FEED; ++i) {
    double e1, e2;
    poison(row, VOCAB);
    CHECK(fk_session_decode(s, greedy[i], row, VOCAB) == FK_OK, "%s: decode %d: %s", fixture, i, fk_last_error());
    ids[NP + i] = greedy[i];
    CHECK(fk_model_logits(m, ids, (size_t)(NP + i + 1), fresh, VOCAB) == FK_OK, "logits: %s", fk_last_error());
    CHECK(read_row(file, i, want) == 0, "read %s row %d", file, i);
    e1 = rel_err(row, fresh, VOCAB);
    e2 = rel_err(row, want, VOCAB);
    if (e1 != e1 || e1 > worst_dec_fresh) worst_dec_fresh = e1;
    if (e2 != e2 || e2 > worst_dec_ref) worst_dec_ref = e2;
  }
  CHECK(worst_dec_fresh < 1e-5, "%s: decode vs fresh prefill: max rel err %g", fixture, worst_dec_fresh);
  CHECK(worst_dec_ref < 1e-3, "%s: decode vs transformers: max rel err %g", fixture, worst_dec_ref);
  CHECK(position_of(s) == NP + FEED, "%s: position after decode %lld", fixture, (long long)position_of(s));

  /* reset, then last-row-only prefill: the one-shot last row. */
  CHECK(fk_session_reset(s) == FK_OK && position_of(s) == 0, "%s: reset: %s", fixture, fk_last_error());
  poison(row, VOCAB);
  CHECK(fk_session_prefill(s, prompt, NP, 0, row, VOCAB) == FK_OK, "%s: prefill last: %s", fixture, fk_last_error());
  CHECK(rel_err(row, all + (size_t)(NP - 1) * VOCAB, VOCAB) < 1e-5, "%s: last-row prefill vs all rows %g", fixture,
        rel_err(row, all + (size_t)(NP - 1) * VOCAB, VOCAB));

  /* The prompt in two parts (25 + 15 rows) gives the one-shot rows. */
  CHECK(fk_session_reset(s) == FK_OK, "reset: %s", fk_last_error());
  poison(part, NP * VOCAB);
  CHECK(fk_session_prefill(s, prompt, 25, 1, part, 25 * VOCAB) == FK_OK, "prefill 25: %s", fk_last_error());
  CHECK(fk_session_prefill(s, prompt + 25, NP - 25, 1, part + 25 * VOCAB, (NP - 25) * VOCAB) == FK_OK,
        "prefill 15: %s", fk_last_error());
  CHECK(position_of(s) == NP, "position after two parts %lld", (long long)position_of(s));
  CHECK(rel_err(part, all, (size_t)NP * VOCAB) < 1e-5, "%s: two-part prefill vs one shot %g", fixture,
        rel_err(part, all, (size_t)NP * VOCAB));
  printf("session %s: prefill %d rows vs transformers %.2e, %d decode steps vs transformers %.2e, vs fresh prefill "
         "%.2e\n", fixture, NP, worst_pre, FEED, worst_dec_ref, worst_dec_fresh);
  fk_session_free(s);
  fk_model_free(m);
}

/* Two sessions of one model, their calls interleaved, give what each gives alone; the context limit; bad input;
 * a session outliving its model handle. */
static void test_session_api(void) {
  char dir[4200];
  fk_model* m = NULL;
  fk_session *a = NULL, *b = NULL, *s = (fk_session*)&s;
  float ra[VOCAB], rb[VOCAB], solo[4][VOCAB];
  static float all[NP * VOCAB];
  static int32_t filler[4096];
  int64_t p = -1, ctx = 0;
  int i;
  path(dir, sizeof dir, "models/tiny-llama");
  CHECK(fk_model_load(dir, "cpu", "f32", 0, &m) == FK_OK, "load %s: %s", dir, fk_last_error());
  if (!m) return;

  /* Alone: prompt, then 4 greedy ids. */
  CHECK(fk_session_new(m, &a) == FK_OK, "new: %s", fk_last_error());
  CHECK(fk_session_prefill(a, kPrompt, NP, 0, ra, VOCAB) == FK_OK, "prefill: %s", fk_last_error());
  for (i = 0; i < 4; ++i)
    CHECK(fk_session_decode(a, kGreedy[i], solo[i], VOCAB) == FK_OK, "decode: %s", fk_last_error());
  /* Interleaved with a second session that runs another prompt. */
  CHECK(fk_session_reset(a) == FK_OK, "reset: %s", fk_last_error());
  CHECK(fk_session_new(m, &b) == FK_OK, "new b: %s", fk_last_error());
  CHECK(fk_session_prefill(a, kPrompt, NP, 0, ra, VOCAB) == FK_OK, "prefill a: %s", fk_last_error());
  CHECK(fk_session_prefill(b, kPrompt + 7, 20, 0, rb, VOCAB) == FK_OK, "prefill b: %s", fk_last_error());
  for (i = 0; i < 4; ++i) {
    CHECK(fk_session_decode(b, kGreedy[i + 3], rb, VOCAB) == FK_OK, "decode b: %s", fk_last_error());
    CHECK(fk_session_decode(a, kGreedy[i], ra, VOCAB) == FK_OK, "decode a: %s", fk_last_error());
    CHECK(rel_err(ra, solo[i], VOCAB) < 1e-6, "interleaved step %d: rel err %g", i, rel_err(ra, solo[i], VOCAB));
  }
  CHECK(position_of(a) == NP + 4 && position_of(b) == 24, "positions %lld %lld", (long long)position_of(a),
        (long long)position_of(b));
  fk_session_free(b);

  /* Bad input: a non-ok status naming the argument, and the session unchanged. */
  BAD(fk_session_new(NULL, &s), "model");
  CHECK(s == NULL, "out not cleared on failure");
  BAD(fk_session_new(m, NULL), "out");
  BAD(fk_session_prefill(NULL, kPrompt, NP, 0, ra, VOCAB), "sess");
  BAD(fk_session_prefill(a, NULL, NP, 0, ra, VOCAB), "ids");
  BAD(fk_session_prefill(a, kPrompt, 0, 0, ra, VOCAB), "n: no tokens");
  BAD(fk_session_prefill(a, NULL, 0, 0, ra, VOCAB), "n: no tokens");
  {
    int32_t oov[3] = {1, VOCAB, 5}, neg[2] = {1, -1};
    BAD(fk_session_prefill(a, oov, 3, 0, ra, VOCAB), "ids[1]: token id 512 is outside the vocabulary [0, 512)");
    BAD(fk_session_prefill(a, neg, 2, 1, all, NP * VOCAB), "ids[1]: token id -1");
  }
  BAD(fk_session_prefill(a, kPrompt, NP, 0, NULL, VOCAB), "out");
  BAD(fk_session_prefill(a, kPrompt, NP, 0, ra, VOCAB - 1), "cap");
  BAD(fk_session_prefill(a, kPrompt, NP, 1, all, NP * VOCAB - 1), "cap: out holds 20479 floats but 40 rows");
  BAD(fk_session_prefill(a, kPrompt, NP, 1, ra, VOCAB), "pass cap >= 20480");
  BAD(fk_session_decode(NULL, 5, ra, VOCAB), "sess");
  BAD(fk_session_decode(a, -1, ra, VOCAB), "token: token id -1 is outside the vocabulary");
  BAD(fk_session_decode(a, VOCAB, ra, VOCAB), "token: token id 512");
  BAD(fk_session_decode(a, 5, NULL, VOCAB), "out");
  BAD(fk_session_decode(a, 5, ra, 0), "cap");
  BAD(fk_session_position(NULL, &p), "sess");
  BAD(fk_session_position(a, NULL), "out");
  BAD(fk_session_max_context(NULL, &ctx), "sess");
  BAD(fk_session_max_context(a, NULL), "out");
  BAD(fk_session_reset(NULL), "sess");
  CHECK(position_of(a) == NP + 4, "position after rejected calls %lld", (long long)position_of(a));
  CHECK(fk_session_decode(a, kGreedy[4], ra, VOCAB) == FK_OK, "decode after errors: %s", fk_last_error());
  CHECK(fk_last_error()[0] == 0, "message after success: '%s'", fk_last_error());

  /* The context: max_context positions, checked before any work. */
  CHECK(fk_session_max_context(a, &ctx) == FK_OK && ctx == 4096, "max_context %lld", (long long)ctx);
  for (i = 0; i < 4096; ++i) filler[i] = (int32_t)((i * 37 + 11) % VOCAB);
  CHECK(fk_session_reset(a) == FK_OK, "reset: %s", fk_last_error());
  BAD(fk_session_prefill(a, filler, 4096, 1, ra, VOCAB), "cap"); /* fits the context, not the buffer */
  {
    static int32_t big[4097];
    memcpy(big, filler, sizeof filler);
    big[4096] = 1;
    BAD(fk_session_prefill(a, big, 4097, 0, ra, VOCAB), "max_context 4096");
    BAD(fk_session_prefill(a, big, 4097, 0, ra, VOCAB), "n: 4097 tokens do not fit");
  }
  CHECK(fk_session_prefill(a, filler, NP, 0, ra, VOCAB) == FK_OK, "prefill: %s", fk_last_error());
  BAD(fk_session_prefill(a, filler, 4096 - NP + 1, 0, ra, VOCAB), "(4056 positions left)");
  CHECK(position_of(a) == NP, "position after a rejected prefill %lld", (long long)position_of(a));
  CHECK(fk_session_prefill(a, filler + NP, 4096 - NP - 1, 0, ra, VOCAB) == FK_OK, "fill: %s", fk_last_error());
  CHECK(fk_session_decode(a, 3, ra, VOCAB) == FK_OK, "last position: %s", fk_last_error());
  CHECK(position_of(a) == 4096, "full position %lld", (long long)position_of(a));
  BAD(fk_session_decode(a, 3, ra, VOCAB), "token: the session is full");
  BAD(fk_session_prefill(a, filler, 1, 0, ra, VOCAB), "(0 positions left)");
  CHECK(fk_session_reset(a) == FK_OK && position_of(a) == 0, "reset after full: %s", fk_last_error());
  CHECK(fk_session_prefill(a, kPrompt, NP, 0, ra, VOCAB) == FK_OK, "prefill after reset: %s", fk_last_error());
  CHECK(fk_session_decode(a, kGreedy[0], ra, VOCAB) == FK_OK && rel_err(ra, solo[0], VOCAB) < 1e-6,
        "after reset the cache is reused: %g", rel_err(ra, solo[0], VOCAB));

  /* A session keeps its model alive after fk_model_free. */
  fk_model_free(m);
  CHECK(fk_session_decode(a, kGreedy[1], ra, VOCAB) == FK_OK && rel_err(ra, solo[1], VOCAB) < 1e-6,
        "decode after fk_model_free: %s", fk_last_error());
  fk_session_free(a);
  fk_session_free(NULL);
}

static void test_model_load_errors(void) {
  char dir[4200], missing[4300];
  fk_model* m = (fk_model*)&m; /* set to NULL on failure */
  path(dir, sizeof dir, "models/tiny-llama");
  path(missing, sizeof missing, "models/no-such-model");
  BAD(fk_model_load(NULL, "cpu", "f32", 0, &m), "dir");
  CHECK(m == NULL, "out not cleared on failure");
  BAD(fk_model_load(dir, "cpu", "f32", 0, NULL), "out");
  BAD(fk_model_load("", "cpu", "f32", 0, &m), "dir");
  BAD(fk_model_load(missing, "cpu", "f32", 0, &m), missing);
  BAD(fk_model_load(missing, "cpu", "f32", 0, &m), "dir");
  BAD(fk_model_load(dir, "tpu", "f32", 0, &m), "device");
  BAD(fk_model_load(dir, "cuda:x", "f32", 0, &m), "device");
  BAD(fk_model_load(dir, "cuda:1x", "f32", 0, &m), "device");
  BAD(fk_model_load(dir, "cuda:99999999999", "f32", 0, &m), "device");
  BAD(fk_model_load(dir, "cpu", "int3", 0, &m), "dtype");
  BAD(fk_model_load(dir, "cpu", "f32", -1, &m), "threads");
  BAD(fk_model_load(dir, "cpu", "f32", 100000, &m), "threads: expected 0 (the default) or 1..");
  {
    char tokdir[4200];
    path(tokdir, sizeof tokdir, "tokenizers/tiny_bytelevel"); /* a directory without config.json */
    BAD(fk_model_load(tokdir, "cpu", "f32", 0, &m), "config.json");
    BAD(fk_model_load(tokdir, "cpu", "f32", 0, &m), "dir: ");
  }
  CHECK(m == NULL, "out not NULL after failures");
  /* NULL device / dtype are the defaults. */
  CHECK(fk_model_load(dir, NULL, NULL, 1, &m) == FK_OK && m != NULL, "defaults: %s", fk_last_error());
  fk_model_free(m);
}

static void test_tokenizer(void) {
  char dir[4200], missing[4300];
  fk_tokenizer* t = NULL;
  const char* text = "Hello, world! Tokens and ids.";
  int32_t ids[256], one_id[1];
  size_t n = 0, need = 0, len = 0;
  char buf[512], small[4];
  int32_t vocab = 0;
  path(dir, sizeof dir, "tokenizers/tiny_bytelevel");
  path(missing, sizeof missing, "tokenizers/no-such-tokenizer");
  CHECK(fk_tokenizer_load(dir, &t) == FK_OK, "load %s: %s", dir, fk_last_error());
  if (!t) return;
  CHECK(fk_tokenizer_vocab_size(t, &vocab) == FK_OK && vocab > 0, "vocab: %s", fk_last_error());

  /* Two-call pattern: size query, then the buffer. */
  CHECK(fk_tokenizer_encode(t, text, strlen(text), 0, NULL, 0, &need) == FK_OK && need > 1, "query: %s", fk_last_error());
  CHECK(fk_tokenizer_encode(t, text, strlen(text), 0, ids, 256, &n) == FK_OK && n == need, "encode: %s", fk_last_error());
  CHECK(fk_tokenizer_decode(t, ids, n, 0, NULL, 0, &len) == FK_OK && len == strlen(text), "decode query: %s (%zu)",
        fk_last_error(), len);
  CHECK(fk_tokenizer_decode(t, ids, n, 0, buf, sizeof buf, &len) == FK_OK, "decode: %s", fk_last_error());
  CHECK(strcmp(buf, text) == 0, "round trip: '%s'", buf);
  CHECK(fk_tokenizer_encode(t, NULL, 0, 0, ids, 256, &n) == FK_OK && n == 0, "empty text: %s", fk_last_error());

  /* Buffers too small: the size needed comes back with the error. */
  n = 0;
  BAD(fk_tokenizer_encode(t, text, strlen(text), 0, one_id, 1, &n), "cap");
  CHECK(n == need, "needed ids in *n: %zu, want %zu", n, need);
  len = 0;
  BAD(fk_tokenizer_decode(t, ids, need, 0, small, sizeof small, &len), "cap");
  CHECK(len == strlen(text), "needed bytes in *len: %zu", len);

  /* Bad input. */
  {
    fk_tokenizer* u = t; /* a failing load sets *out to NULL */
    BAD(fk_tokenizer_load(NULL, &u), "dir");
    CHECK(u == NULL, "out not cleared on failure");
    BAD(fk_tokenizer_load(dir, NULL), "out");
    BAD(fk_tokenizer_load(missing, &u), missing);
    BAD(fk_tokenizer_load(g_data, &u), "tokenizer.json"); /* a directory without tokenizer.json */
    BAD(fk_tokenizer_load(g_data, &u), "dir: ");
    CHECK(u == NULL, "out not cleared on failure");
  }
  BAD(fk_tokenizer_encode(NULL, text, 3, 0, ids, 256, &n), "tok");
  BAD(fk_tokenizer_encode(t, NULL, 3, 0, ids, 256, &n), "text");
  BAD(fk_tokenizer_encode(t, text, 3, 0, ids, 256, NULL), "n");
  BAD(fk_tokenizer_encode(t, text, 3, 0, NULL, 5, &n), "ids");
  BAD(fk_tokenizer_encode(t, "a\xff", 2, 0, ids, 256, &n), "UTF-8");
  {
    /* More than 64 MiB of text (limits::kMaxTextBytes): refused before encoding, naming len and the limit. */
    const size_t big_len = ((size_t)64 << 20) + 1;
    char* big = (char*)malloc(big_len);
    CHECK(big != NULL, "malloc %zu", big_len);
    if (big) {
      memset(big, 'a', big_len);
      n = 7;
      BAD(fk_tokenizer_encode(t, big, big_len, 0, NULL, 0, &n), "len: 67108865 bytes");
      BAD(fk_tokenizer_encode(t, big, big_len, 0, NULL, 0, &n), "64 MiB");
      CHECK(n == 7, "*n written on failure: %zu", n);
      free(big);
    }
  }
  {
    int32_t oov[2] = {0, vocab}, neg[1] = {-5};
    BAD(fk_tokenizer_decode(t, oov, 2, 0, buf, sizeof buf, &len), "ids[1]");
    BAD(fk_tokenizer_decode(t, neg, 1, 0, buf, sizeof buf, &len), "ids[0]");
  }
  BAD(fk_tokenizer_decode(NULL, ids, 1, 0, buf, sizeof buf, &len), "tok");
  BAD(fk_tokenizer_decode(t, NULL, 1, 0, buf, sizeof buf, &len), "ids");
  BAD(fk_tokenizer_decode(t, ids, 1, 0, buf, sizeof buf, NULL), "len");
  BAD(fk_tokenizer_decode(t, ids, 1, 0, NULL, 8, &len), "buf");
  BAD(fk_tokenizer_vocab_size(NULL, &vocab), "tok");
  fk_tokenizer_free(t);
  fk_tokenizer_free(NULL);
}

int main(int argc, char** argv) {
#ifdef FLASHKIT_TEST_DATA
  snprintf(g_data, sizeof g_data, "%s", argc > 1 ? argv[1] : FLASHKIT_TEST_DATA);
#else
  if (argc < 2) {
    fprintf(stderr, "usage: %s TESTS_DATA_DIR\n", argv[0]);
    return 2;
  }
  snprintf(g_data, sizeof g_data, "%s", argv[1]);
#endif
  test_model();
  test_stream();
  test_session_fidelity("tiny-llama");
  test_session_fidelity("tiny-gemma3");
  test_session_api();
  test_model_load_errors();
  test_tokenizer();
  printf("flashkit C API (engine, tokenizer): %d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
