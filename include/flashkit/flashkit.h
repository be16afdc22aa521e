/* flashkit C API: a plain C ABI over the C++ library. Every call returns an fk_status; on failure
 * fk_last_error() returns a message (thread-local) naming the argument at fault and what was expected. */
#ifndef FLASHKIT_H
#define FLASHKIT_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FK_API __declspec(dllexport)
#else
#define FK_API __attribute__((visibility("default")))
#endif

typedef enum {
  FK_OK = 0,
  FK_INVALID_ARGUMENT = 1,
  FK_UNSUPPORTED = 2,
  FK_OUT_OF_MEMORY = 3,
  FK_DEVICE_ERROR = 4,
  FK_INTERNAL = 5
} fk_status;

/* FK_E4M3: OCP FP8 E4M3FN, one byte; only fk_attention_forward_fp8 and fk_quantize_e4m3 take it. */
typedef enum { FK_F32 = 0, FK_BF16 = 1, FK_F16 = 2, FK_F64 = 3, FK_I32 = 4, FK_E4M3 = 5 } fk_dtype;
typedef enum { FK_CPU = 0, FK_CUDA = 1 } fk_device;
typedef enum { FK_IMPL_AUTO = 0, FK_IMPL_REFERENCE = 1, FK_IMPL_STANDARD = 2, FK_IMPL_FLASH = 3 } fk_impl;

typedef struct {
  void* data;
  int32_t dtype;        /* fk_dtype */
  int32_t device;       /* fk_device */
  int32_t device_index;
  int32_t ndim;
  int64_t shape[4];
  int64_t strides[4];   /* in elements */
} fk_tensor;

typedef struct {
  float scale;           /* 0: 1/sqrt(head_dim) */
  int32_t causal;
  int64_t window_left;   /* -1: unbounded */
  int64_t window_right;  /* -1: unbounded */
  float softcap;         /* 0: off */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int64_t num_seqs;
  int32_t impl;          /* fk_impl */
  int32_t check_finite;
} fk_attention_options;

typedef struct {
  double flops;
  double bytes_read;
  double bytes_written;
  double workspace_bytes;
  char model[256];
  char kernel[64];
} fk_cost;

FK_API const char* fk_version(void);
FK_API const char* fk_last_error(void);
FK_API const char* fk_status_name(fk_status s);
FK_API const char* fk_cpu_isa(void);
/* Reads the FLASHKIT_* environment variables into the process default tuning (kernel paths, limits, CUDA
   switches) that calls without their own use. The one place a front end reads the environment: Python calls it
   when it loads the library; a C program that wants the variables honoured calls it once at start-up (without
   it, the first call that needs the default reads them). */
FK_API void fk_tuning_from_env(void);
FK_API int32_t fk_num_threads(void);
/* n in 1..fk_max_threads(); FK_INVALID_ARGUMENT otherwise. */
FK_API fk_status fk_set_num_threads(int32_t n);
/* The most threads any call accepts (fk_set_num_threads, fk_model_load, fk_attention_options.threads): 4 x the
 * machine's hardware threads, at most 1024. */
FK_API int32_t fk_max_threads(void);
FK_API int32_t fk_cuda_device_count(void);
/* The CUDA stream (a cudaStream_t) this thread's flashkit launches use; NULL is the legacy default
 * stream. FK_UNSUPPORTED in a build without CUDA. */
FK_API fk_status fk_cuda_set_stream(void* stream);
FK_API void* fk_cuda_get_stream(void);

/* Fills defaults: scale 0, not causal, unbounded window, no softcap, impl auto, check_finite 1. */
FK_API fk_status fk_attention_options_init(fk_attention_options* opts);

/* Contiguous tensor description helper. */
FK_API fk_status fk_tensor_init(fk_tensor* t, void* data, int32_t dtype, int32_t device, int32_t ndim,
                                const int64_t* shape);

FK_API fk_status fk_attention_forward(const fk_tensor* q, const fk_tensor* k, const fk_tensor* v,
                                      const fk_tensor* o, const fk_tensor* lse, const fk_attention_options* opts,
                                      fk_cost* cost /* may be NULL */);

/* The fp8 forward of include/flashkit/attention_fp8.hpp (its semantics, accuracy and limits): q, k, v FK_E4M3, o
   FK_BF16, lse FK_F32; the real inputs are x * descale (each finite and > 0). opts: scale, causal, impl (auto,
   flash, reference on CPU), check_finite; windows, softcap and cu_seqlens are rejected (FK_INVALID_ARGUMENT). */
typedef struct {
  float q_descale;
  float k_descale;
  float v_descale;
} fk_fp8_scales;
FK_API fk_status fk_attention_forward_fp8(const fk_tensor* q, const fk_tensor* k, const fk_tensor* v,
                                          const fk_tensor* o, const fk_tensor* lse, const fk_fp8_scales* scales,
                                          const fk_attention_options* opts, fk_cost* cost /* may be NULL */);
/* Per-tensor quantization: *descale = amax(|src|) / 448 (1 for all zeros), dst = e4m3(src / *descale); src FK_F32,
   FK_BF16 or FK_F16, dst FK_E4M3, same shape, contiguous, same device. */
FK_API fk_status fk_quantize_e4m3(const fk_tensor* src, const fk_tensor* dst, float* descale);

FK_API fk_status fk_attention_backward(const fk_tensor* dout, const fk_tensor* q, const fk_tensor* k,
                                       const fk_tensor* v, const fk_tensor* o, const fk_tensor* lse,
                                       const fk_tensor* dq, const fk_tensor* dk, const fk_tensor* dv,
                                       const fk_attention_options* opts, fk_cost* cost /* may be NULL */);


/* ---- Tokenizer and model engine -------------------------------------------------------------------------
 * Opaque handles; every function returns an fk_status and, on failure, fk_last_error() names the argument at
 * fault and what was expected. Threads: a handle may be used from several threads at once. A tokenizer serves
 * them concurrently; a model runs one fk_generate / fk_model_logits / fk_session_* call at a time and the others
 * wait (its sessions share the backend's scratch buffers), so threads may each drive their own session of one
 * model; one model per thread gives parallel speed. Free a handle once, when no call on *that handle* is running
 * (the free itself is not synchronized); a session keeps its model alive, so fk_model_free while other threads
 * use sessions of the model is safe. *_free(NULL) is a no-op.
 *
 * Output buffers, two-call pattern: pass the buffer NULL and cap 0 to ask for the size (FK_OK, the size in
 * *n / *len); a non-NULL buffer whose cap is too small gives FK_INVALID_ARGUMENT with the size needed in
 * *n / *len and a message that says so. */
typedef struct fk_tokenizer fk_tokenizer;
typedef struct fk_model fk_model;
typedef struct fk_session fk_session;

/* Reads DIR/tokenizer.json (and DIR/tokenizer_config.json when present). */
FK_API fk_status fk_tokenizer_load(const char* dir, fk_tokenizer** out);
/* A tokenizer is safe to use from several threads at once and may be freed while other threads are inside calls
 * on it: it is destroyed when the last of those returns. Its handle stays valid memory after the free, so a call
 * started later fails with FK_INVALID_ARGUMENT ("freed") instead of crashing, and freeing twice is a no-op. */
FK_API void fk_tokenizer_free(fk_tokenizer* tok);
/* Number of ids (model vocabulary plus added tokens). */
FK_API fk_status fk_tokenizer_vocab_size(const fk_tokenizer* tok, int32_t* out);
/* Token ids of the UTF-8 text[0, len) (text may be NULL when len is 0); add_special: also what the
 * post-processor adds (e.g. BOS). Writes *n ids to ids[0, cap). Invalid UTF-8: FK_INVALID_ARGUMENT naming the
 * byte offset; more than 64 MiB of text (flashkit's limit for one input): FK_INVALID_ARGUMENT naming len. */
FK_API fk_status fk_tokenizer_encode(const fk_tokenizer* tok, const char* text, size_t len, int add_special,
                                     int32_t* ids, size_t cap, size_t* n);
/* UTF-8 text of ids[0, n); skip_special drops special tokens. Writes *len bytes and a terminating NUL to
 * buf, so cap must be at least *len + 1 (the size query returns *len without the NUL). Every id must be in
 * [0, vocab size). */
FK_API fk_status fk_tokenizer_decode(const fk_tokenizer* tok, const int32_t* ids, size_t n, int skip_special,
                                     char* buf, size_t cap, size_t* len);

/* Loads a model directory (config.json + safetensors) or a .gguf file. device: "cpu", "cuda" or "cuda:N"
 * (NULL: "cpu"); dtype, the weights' storage: "auto", "f32", "bf16" or "f16" (NULL: "auto"); threads: CPU
 * threads, 0 (fk_num_threads()) or 1..fk_max_threads(). A session's KV cache that cannot fit in memory is
 * refused here (FK_OUT_OF_MEMORY) before anything large is allocated. */
FK_API fk_status fk_model_load(const char* dir, const char* device, const char* dtype, int threads, fk_model** out);
FK_API void fk_model_free(fk_model* model);
FK_API fk_status fk_model_vocab_size(const fk_model* model, int64_t* out);
/* Positions a session of the model holds (what fk_session_max_context reports). */
FK_API fk_status fk_model_max_context(const fk_model* model, int64_t* out);
/* Prefills prompt[0, n_prompt) in a fresh session and samples up to max_new_tokens (>= 1) tokens into
 * out_ids; *n_out is how many. temperature 0: greedy (top_k, top_p and seed then do not matter); top_k 0:
 * off; top_p in (0, 1]. Stops early after one of the model's eos ids (which is included) or when the context is
 * full. The context bounds the output: cap must be >= min(max_new_tokens, max_context - n_prompt + 1) (checked
 * before any work; *n_out then says that number), so a large max_new_tokens needs no large buffer. */
FK_API fk_status fk_generate(fk_model* model, const int32_t* prompt, size_t n_prompt, int max_new_tokens,
                             float temperature, int top_k, float top_p, uint64_t seed, int32_t* out_ids, size_t cap,
                             size_t* n_out);
/* Streaming: as fk_generate, but each id goes to on_token(user, id) as soon as it is chosen (no output buffer, so
 * max_new_tokens is bounded by the context only); on_token returning 0 stops generation after that id. *n_out:
 * the ids handed to on_token. The callback runs on the calling thread with the model's lock held: it must not call
 * back into this model. */
typedef int (*fk_token_callback)(void* user, int32_t id);
FK_API fk_status fk_generate_stream(fk_model* model, const int32_t* prompt, size_t n_prompt, int max_new_tokens,
                                    float temperature, int top_k, float top_p, uint64_t seed,
                                    fk_token_callback on_token, void* user, size_t* n_out);
/* The sampling defaults of `flashkit generate` (include/flashkit/sampling_defaults.hpp), for front ends that
 * sample like the CLI: max_new_tokens 128, temperature 0.8, top_k 40, top_p 0.95, min_p 0, seed 0. */
typedef struct {
  int32_t max_new_tokens;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  float repetition_penalty;
  uint64_t seed;
} fk_sampling_defaults;
FK_API void fk_sampling_defaults_init(fk_sampling_defaults* out);
/* Speculative decoding (docs/speculative.md): a proposer guesses tokens, the model verifies them in one forward
 * pass. Greedy output equals fk_generate's; with temperature > 0 the output follows the same distribution. */
typedef struct {
  fk_model* draft;           /* a draft model sharing the tokenizer (vocab <= the model's), or NULL */
  int32_t draft_tokens;      /* tokens proposed per step, 1..64; 0: adaptive */
  int32_t max_draft_tokens;  /* adaptive's upper bound, 1..64 */
  int32_t lookup;            /* n-gram prompt lookup: longest n-gram matched, 0..64 (0: off) */
  int32_t tree_width;        /* > 1: that many n-gram continuations verified as a token tree (needs lookup) */
} fk_spec_options;
typedef struct {
  int64_t steps, proposed, accepted, emitted; /* verification steps, draft tokens proposed / accepted, tokens produced */
  double proposer_s, verifier_s, decode_s;    /* seconds proposing, verifying, and the whole decode phase */
} fk_spec_stats;
/* draft NULL, draft_tokens 4, max_draft_tokens 8, lookup 0, tree_width 1 (speculation off until draft or lookup). */
FK_API void fk_spec_options_init(fk_spec_options* opts);
/* fk_generate with speculative decoding (spec NULL or off: plain fk_generate). stats may be NULL. */
FK_API fk_status fk_generate_speculative(fk_model* model, const int32_t* prompt, size_t n_prompt, int max_new_tokens,
                                         float temperature, int top_k, float top_p, uint64_t seed,
                                         const fk_spec_options* spec, int32_t* out_ids, size_t cap, size_t* n_out,
                                         fk_spec_stats* stats);
/* Prefills prompt[0, n) in a fresh session and copies the last position's logits (vocab size floats, f32)
 * to out_last_logits; cap (in floats) must be >= the vocab size. */
FK_API fk_status fk_model_logits(fk_model* model, const int32_t* prompt, size_t n, float* out_last_logits,
                                 size_t cap);

/* ---- Sessions: one sequence and its KV cache, token by token ----------------------------------------------
 *
 *   fk_session* s;  float row[VOCAB];
 *   fk_session_new(model, &s);
 *   fk_session_prefill(s, prompt, n, 0, row, VOCAB);   // appends the prompt; row: the last position's logits
 *   fk_session_decode(s, next_id, row, VOCAB);         // appends one token; row: the logits after it
 *   fk_session_free(s);
 *
 * A session holds max_context positions (fk_session_max_context: the model's default context,
 * min(max_position_embeddings, 4096)); fk_session_position says how many it holds. Logits are f32, as the
 * engine computes them (the last row of fk_session_prefill is, up to f32 rounding, fk_model_logits' row).
 * Threads: every fk_session_* call takes its model's lock (the one fk_generate and fk_model_logits take), so the
 * sessions of one model run one call at a time; calls of several sessions may interleave (each has its own KV
 * cache); use one model per thread for parallel sequences. A session keeps its model's weights alive:
 * fk_model_free may come before fk_session_free. Arguments are checked before any work: a rejected call leaves
 * the session as it was. */

/* A new, empty session of `model` (*out is NULL on failure). */
FK_API fk_status fk_session_new(fk_model* model, fk_session** out);
FK_API void fk_session_free(fk_session* sess);
/* Appends ids[0, n) (n >= 1, every id in [0, vocab size), position + n <= max_context) to the session's cache
 * (in chunks of 512 positions). all_logits 0: writes the last position's logits (vocab size floats) to out, cap
 * (in floats) >= the vocab size; all_logits non-zero: every position's row, [n, vocab] row-major, cap >= n x the
 * vocab size. */
FK_API fk_status fk_session_prefill(fk_session* sess, const int32_t* ids, size_t n, int all_logits, float* out,
                                    size_t cap);
/* Appends one token (in [0, vocab size), position < max_context) and writes its logits (vocab size floats) to
 * out; cap >= the vocab size. The graph-friendly one-row path (on CUDA a replayed graph). */
FK_API fk_status fk_session_decode(fk_session* sess, int32_t token, float* out, size_t cap);
/* Positions in the cache: the tokens prefilled and decoded since fk_session_new or fk_session_reset. */
FK_API fk_status fk_session_position(const fk_session* sess, int64_t* out);
/* Positions the cache holds (position + the tokens of a call must not exceed it). */
FK_API fk_status fk_session_max_context(const fk_session* sess, int64_t* out);
/* Empties the cache (position 0); the buffers are kept. */
FK_API fk_status fk_session_reset(fk_session* sess);

#ifdef __cplusplus
}
#endif
#endif /* FLASHKIT_H */
