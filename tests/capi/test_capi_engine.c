/* The C API of the tokenizer and the model engine, from plain C99: greedy generation on tests/data/models/tiny-llama
 * equals transformers' (expected.json), last-row logits, the tokenizer's two-call buffers and round trip, and bad
 * input of every kind: a non-ok status and a message naming the argument. The data directory is argv[1], else the
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
  BAD(fk_model_load(dir, "cpu", "int3", 0, &m), "dtype");
  BAD(fk_model_load(dir, "cpu", "f32", -1, &m), "threads");
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
  test_model_load_errors();
  test_tokenizer();
  printf("flashkit C API (engine, tokenizer): %d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
