// The C ABI of the tokenizer and the model engine (include/flashkit/flashkit.h, "Tokenizer and model engine"):
// opaque handles over flashkit::Tokenizer and flashkit::Model; every exception becomes a status + message in the
// same thread-local fk_last_error() that the attention functions use (flashkit_c.cpp).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "core/limits.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/flashkit.h"
#include "flashkit/flashkit.hpp"
#include "flashkit/sampling_defaults.hpp"
#include "flashkit/tokenizer.hpp"

#include "capi/guarded.hpp"

// One thread may free a tokenizer while others are inside calls on it, or about to enter one with the pointer they
// already hold (Python's close() racing encode() on another thread). So: every call holds a reference for its
// duration and fk_tokenizer_free only drops the owner's; whoever drops the last one destroys the Tokenizer. The
// handle itself (a few dozen bytes) is never deallocated: it stays as a tombstone on a global list, so a call that
// starts after the free finds `freed` set and fails cleanly instead of reading freed memory.
struct fk_tokenizer {
  explicit fk_tokenizer(flashkit::Tokenizer t) : tok(std::make_unique<const flashkit::Tokenizer>(std::move(t))) {}
  std::unique_ptr<const flashkit::Tokenizer> tok;  // destroyed by the last reference after the free
  mutable std::atomic<int64_t> refs{1};            // the owner's + one per call in flight
  mutable std::atomic<bool> freed{false}, destroyed{false};
  fk_tokenizer* next_tombstone = nullptr;
};

struct fk_model {
  std::shared_ptr<flashkit::Model> model;
  // The engine's sessions of one model share its backend's scratch buffers: concurrent sessions give wrong
  // results, so the C API runs one generate / logits / session call per model at a time. Shared with the model's
  // fk_sessions, which may outlive this handle (a flashkit::Session keeps its Model alive).
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
};

struct fk_session {
  std::shared_ptr<std::mutex> mu;  // the model's lock
  std::unique_ptr<flashkit::Session> session;
  int64_t vocab = 0;
};

namespace {

using flashkit::Status;
using flashkit::capi_detail::guarded;
using flashkit::capi_detail::set_last_error;

[[noreturn]] void bad(const std::string& msg) { flashkit::fail(Status::invalid_argument, msg); }


void need(const void* p, const char* name) {
  if (p == nullptr) bad(std::string(name) + ": pointer is NULL");
}

// Freed handles, kept reachable (leak checkers stay quiet; the memory is a few dozen bytes per tokenizer freed).
std::atomic<fk_tokenizer*> g_tombstones{nullptr};

void release(const fk_tokenizer* t) {
  if (t->refs.fetch_sub(1) != 1) return;
  auto* h = const_cast<fk_tokenizer*>(t);
  if (h->destroyed.exchange(true)) return;  // a late call on a tombstone dropped its reference again
  h->tok.reset();
  h->next_tombstone = g_tombstones.load();
  while (!g_tombstones.compare_exchange_weak(h->next_tombstone, h)) {
  }
}

// A tokenizer call's reference (see fk_tokenizer): the tokenizer stays alive until the call returns.
class TokenizerRef {
 public:
  explicit TokenizerRef(const fk_tokenizer* t) : t_(t) {
    need(t, "tok");
    t_->refs.fetch_add(1);  // seq_cst with the free's exchange + fetch_sub: a call after the free sees `freed`
    if (t_->freed.load()) {
      release(t_);
      bad("tok: this tokenizer has been freed (fk_tokenizer_free)");
    }
  }
  ~TokenizerRef() { release(t_); }
  TokenizerRef(const TokenizerRef&) = delete;
  TokenizerRef& operator=(const TokenizerRef&) = delete;
  const flashkit::Tokenizer* operator->() const { return t_->tok.get(); }

 private:
  const fk_tokenizer* t_;
};

// ids[0, n) all in [0, vocab); names the argument and the first bad index.
void check_ids(const int32_t* ids, size_t n, int64_t vocab, const char* name) {
  if (n > 0) need(ids, name);
  for (size_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      bad(std::string(name) + "[" + std::to_string(i) + "]: token id " + std::to_string(ids[i]) +
          " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

}  // namespace

extern "C" {

fk_status fk_tokenizer_load(const char* dir, fk_tokenizer** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    need(dir, "dir");
    if (*dir == 0) bad("dir: empty path (expected a directory with tokenizer.json)");
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      bad(std::string("dir: '") + dir + "' is not a directory (expected a directory with tokenizer.json)");
    try {
      auto h = std::make_unique<fk_tokenizer>(flashkit::Tokenizer::from_dir(dir));
      *out = h.release();
    } catch (const flashkit::Error& e) {
      if (e.status() != Status::invalid_argument) throw;
      throw flashkit::Error(e.status(), std::string("dir: ") + e.what());  // a missing or malformed file in dir
    }
  });
}

void fk_tokenizer_free(fk_tokenizer* tok) {
  if (tok == nullptr || tok->freed.exchange(true)) return;  // NULL or freed twice
  release(tok);
}

fk_status fk_tokenizer_vocab_size(const fk_tokenizer* tok, int32_t* out) {
  return guarded([&] {
    TokenizerRef t(tok);
    need(out, "out");
    *out = t->vocab_size();
  });
}

fk_status fk_tokenizer_encode(const fk_tokenizer* tok, const char* text, size_t len, int add_special, int32_t* ids,
                              size_t cap, size_t* n) {
  return guarded([&] {
    TokenizerRef t(tok);
    need(n, "n");
    if (len > 0) need(text, "text");
    if (ids == nullptr && cap > 0) bad("ids: pointer is NULL but cap is " + std::to_string(cap));
    if (len > uint64_t(flashkit::limits::kMaxTextBytes))  // as every other front end (CLI files, Python encode)
      bad("len: " + std::to_string(len) + " bytes of text, more than flashkit's limit of " +
          std::to_string(flashkit::limits::kMaxTextBytes >> 20) + " MiB for one input");
    const std::vector<int32_t> r = t->encode(std::string_view(len ? text : "", len), add_special != 0);
    *n = r.size();
    if (ids == nullptr) return;  // size query
    if (cap < r.size())
      bad("cap: the ids buffer holds " + std::to_string(cap) + " ids but the text encodes to " +
          std::to_string(r.size()) + " (returned in *n); call again with cap >= " + std::to_string(r.size()));
    if (!r.empty()) std::memcpy(ids, r.data(), r.size() * sizeof(int32_t));
  });
}

fk_status fk_tokenizer_decode(const fk_tokenizer* tok, const int32_t* ids, size_t n, int skip_special, char* buf,
                              size_t cap, size_t* len) {
  return guarded([&] {
    TokenizerRef t(tok);
    need(len, "len");
    check_ids(ids, n, t->vocab_size(), "ids");
    if (buf == nullptr && cap > 0) bad("buf: pointer is NULL but cap is " + std::to_string(cap));
    const std::string s = t->decode(std::span<const int32_t>(n ? ids : nullptr, n), skip_special != 0);
    *len = s.size();
    if (buf == nullptr) return;  // size query
    if (cap < s.size() + 1)
      bad("cap: the buffer holds " + std::to_string(cap) + " bytes but the text needs " + std::to_string(s.size()) +
          " + 1 for the NUL (the length is returned in *len); call again with cap >= " +
          std::to_string(s.size() + 1));
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = 0;
  });
}

fk_status fk_model_load(const char* dir, const char* device, const char* dtype, int threads, fk_model** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    need(dir, "dir");
    if (*dir == 0) bad("dir: empty path (expected a model directory or a .gguf file)");
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec))
      bad(std::string("dir: '") + dir + "' does not exist (expected a model directory or a .gguf file)");
    flashkit::check_threads(threads, "threads");
    flashkit::LoadOptions o;
    o.device = device ? device : "cpu";
    o.dtype = dtype ? dtype : "auto";
    o.threads = threads;
    auto h = std::make_unique<fk_model>();
    try {
      h->model = flashkit::Model::load(dir, o);
    } catch (const flashkit::Error& e) {
      // Name the argument: the engine's messages say what is wrong but not which C argument carried it.
      const std::string m = e.what();
      const char* arg = m.rfind("unknown dtype", 0) == 0    ? "dtype"
                        : m.rfind("unknown device", 0) == 0 ? "device"
                                                            : nullptr;
      if (!arg && (m.rfind("device", 0) == 0 || e.status() != Status::invalid_argument))
        throw;  // already names the device, or not about an argument (a device error, out of memory)
      if (!arg) arg = "dir";  // a missing or malformed file in the directory
      throw flashkit::Error(e.status(), std::string(arg) + ": " + m);
    }
    *out = h.release();
  });
}

void fk_model_free(fk_model* model) { delete model; }

fk_status fk_model_vocab_size(const fk_model* model, int64_t* out) {
  return guarded([&] {
    need(model, "model");
    need(out, "out");
    *out = model->model->info().vocab_size;
  });
}

fk_status fk_model_max_context(const fk_model* model, int64_t* out) {
  return guarded([&] {
    need(model, "model");
    need(out, "out");
    *out = model->model->info().max_context;
  });
}

// The prompt and sampling arguments every generate call shares (the output buffer is checked apart).
static flashkit::GenerateOptions sampling_args(const fk_model* model, const int32_t* prompt, size_t n_prompt,
                                               int max_new_tokens, float temperature, int top_k, float top_p,
                                               uint64_t seed, size_t* n_out) {
  need(model, "model");
  need(n_out, "n_out");
  *n_out = 0;
  if (n_prompt == 0) bad("n_prompt: the prompt is empty (give at least one token)");
  check_ids(prompt, n_prompt, model->model->info().vocab_size, "prompt");
  if (max_new_tokens < 1) bad("max_new_tokens: must be at least 1, got " + std::to_string(max_new_tokens));
  if (!std::isfinite(temperature) || temperature < 0)
    bad("temperature: must be finite and >= 0 (0: greedy), got " + std::to_string(temperature));
  if (top_k < 0) bad("top_k: must be >= 0 (0: off), got " + std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1)) bad("top_p: must be in (0, 1], got " + std::to_string(top_p));
  const int64_t ctx = model->model->info().max_context;
  if (int64_t(n_prompt) > ctx)
    bad("n_prompt: the prompt of " + std::to_string(n_prompt) + " tokens does not fit the context of " +
        std::to_string(ctx) + " tokens");
  flashkit::GenerateOptions g;
  g.max_new_tokens = max_new_tokens;
  g.temperature = temperature;
  g.top_k = top_k;
  g.top_p = top_p;
  g.seed = seed;
  return g;
}

// The arguments fk_generate and fk_generate_speculative share, checked in one place; returns the options. Every
// generated token but the last takes a context position, so at most min(max_new_tokens, max_context - n_prompt + 1)
// ids come back: out_ids is sized by that, never by max_new_tokens alone (*n_out says the size when cap is short).
static flashkit::GenerateOptions generate_args(const fk_model* model, const int32_t* prompt, size_t n_prompt,
                                               int max_new_tokens, float temperature, int top_k, float top_p,
                                               uint64_t seed, const int32_t* out_ids, size_t cap, size_t* n_out) {
  flashkit::GenerateOptions g = sampling_args(model, prompt, n_prompt, max_new_tokens, temperature, top_k, top_p,
                                              seed, n_out);
  need(out_ids, "out_ids");
  const int64_t ctx = model->model->info().max_context;
  const size_t most = size_t(std::min<int64_t>(max_new_tokens, ctx - int64_t(n_prompt) + 1));
  if (cap < most) {
    *n_out = most;
    bad("cap: out_ids holds " + std::to_string(cap) + " ids but up to " + std::to_string(most) +
        " can be generated (min(max_new_tokens " + std::to_string(max_new_tokens) + ", max_context " +
        std::to_string(ctx) + " - n_prompt + 1)); pass cap >= " + std::to_string(most));
  }
  return g;
}

fk_status fk_generate(fk_model* model, const int32_t* prompt, size_t n_prompt, int max_new_tokens, float temperature,
                      int top_k, float top_p, uint64_t seed, int32_t* out_ids, size_t cap, size_t* n_out) {
  return guarded([&] {
    flashkit::GenerateOptions g = generate_args(model, prompt, n_prompt, max_new_tokens, temperature, top_k, top_p,
                                                seed, out_ids, cap, n_out);
    std::lock_guard<std::mutex> lock(*model->mu);
    auto session = model->model->new_session();
    const flashkit::GenerationResult r =
        flashkit::generate(*session, std::span<const int32_t>(prompt, n_prompt), g);
    const size_t k = std::min(r.tokens.size(), cap);
    if (k) std::memcpy(out_ids, r.tokens.data(), k * sizeof(int32_t));
    *n_out = k;
  });
}

fk_status fk_generate_stream(fk_model* model, const int32_t* prompt, size_t n_prompt, int max_new_tokens,
                             float temperature, int top_k, float top_p, uint64_t seed, fk_token_callback on_token,
                             void* user, size_t* n_out) {
  return guarded([&] {
    flashkit::GenerateOptions g =
        sampling_args(model, prompt, n_prompt, max_new_tokens, temperature, top_k, top_p, seed, n_out);
    need(reinterpret_cast<const void*>(on_token), "on_token");
    std::lock_guard<std::mutex> lock(*model->mu);
    auto session = model->model->new_session();
    size_t count = 0;
    flashkit::generate(*session, std::span<const int32_t>(prompt, n_prompt), g, [&](int32_t id) {
      ++count;
      return on_token(user, id) != 0;
    });
    *n_out = count;
  });
}

void fk_sampling_defaults_init(fk_sampling_defaults* out) {
  if (!out) return;
  const flashkit::SamplingDefaults& d = flashkit::kSamplingDefaults;
  out->max_new_tokens = int32_t(d.max_new_tokens);
  out->temperature = d.temperature;
  out->top_k = d.top_k;
  out->top_p = d.top_p;
  out->min_p = d.min_p;
  out->repetition_penalty = d.repetition_penalty;
  out->seed = d.seed;
}

void fk_spec_options_init(fk_spec_options* o) {
  if (!o) return;
  o->draft = nullptr;
  o->draft_tokens = 4;
  o->max_draft_tokens = 8;
  o->lookup = 0;
  o->tree_width = 1;
}

fk_status fk_generate_speculative(fk_model* model, const int32_t* prompt, size_t n_prompt, int max_new_tokens,
                                  float temperature, int top_k, float top_p, uint64_t seed,
                                  const fk_spec_options* spec, int32_t* out_ids, size_t cap, size_t* n_out,
                                  fk_spec_stats* stats) {
  if (stats) *stats = fk_spec_stats{};
  if (!spec || (!spec->draft && spec->lookup == 0))
    return fk_generate(model, prompt, n_prompt, max_new_tokens, temperature, top_k, top_p, seed, out_ids, cap, n_out);
  return guarded([&] {
    flashkit::GenerateOptions g = generate_args(model, prompt, n_prompt, max_new_tokens, temperature, top_k, top_p,
                                                seed, out_ids, cap, n_out);
    g.speculative.draft_tokens = spec->draft_tokens;
    g.speculative.max_draft_tokens = spec->max_draft_tokens;
    g.speculative.lookup = spec->lookup;
    g.speculative.tree_width = spec->tree_width;
    // Both models' locks (one when the draft is the model itself), taken together so two calls cannot deadlock.
    std::unique_lock<std::mutex> a(*model->mu, std::defer_lock), b;
    std::unique_ptr<flashkit::Session> draft;
    if (spec->draft && spec->draft->mu != model->mu) {
      b = std::unique_lock<std::mutex>(*spec->draft->mu, std::defer_lock);
      std::lock(a, b);
    } else {
      a.lock();
    }
    auto session = model->model->new_session();
    if (spec->draft) {
      draft = spec->draft->model->new_session();
      g.speculative.draft = draft.get();
    }
    const flashkit::GenerationResult r =
        flashkit::generate(*session, std::span<const int32_t>(prompt, n_prompt), g);
    const size_t k = std::min(r.tokens.size(), cap);
    if (k) std::memcpy(out_ids, r.tokens.data(), k * sizeof(int32_t));
    *n_out = k;
    if (stats) {
      stats->steps = r.spec.steps, stats->proposed = r.spec.proposed, stats->accepted = r.spec.accepted;
      stats->emitted = r.spec.emitted;
      stats->proposer_s = r.spec.proposer_s, stats->verifier_s = r.spec.verifier_s, stats->decode_s = r.decode_s;
    }
  });
}

fk_status fk_model_logits(fk_model* model, const int32_t* prompt, size_t n, float* out_last_logits, size_t cap) {
  return guarded([&] {
    need(model, "model");
    if (n == 0) bad("n: the prompt is empty (give at least one token)");
    const int64_t vocab = model->model->info().vocab_size;
    check_ids(prompt, n, vocab, "prompt");
    need(out_last_logits, "out_last_logits");
    if (cap < size_t(vocab))
      bad("cap: out_last_logits holds " + std::to_string(cap) + " floats but the vocabulary has " +
          std::to_string(vocab) + "; pass cap >= " + std::to_string(vocab));
    std::lock_guard<std::mutex> lock(*model->mu);
    auto session = model->model->new_session();
    session->prefill(std::span<const int32_t>(prompt, n));
    const std::span<const float> l = session->logits();
    std::memcpy(out_last_logits, l.data(), l.size() * sizeof(float));
  });
}

fk_status fk_session_new(fk_model* model, fk_session** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    need(model, "model");
    auto h = std::make_unique<fk_session>();
    h->mu = model->mu;
    h->vocab = model->model->info().vocab_size;
    std::lock_guard<std::mutex> lock(*model->mu);  // a new session reserves backend buffers
    h->session = model->model->new_session();
    *out = h.release();
  });
}

void fk_session_free(fk_session* sess) {
  if (sess == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(*sess->mu);  // the session frees backend buffers
    sess->session.reset();                        // (and the model, when it is its last user)
  }
  delete sess;
}

fk_status fk_session_prefill(fk_session* sess, const int32_t* ids, size_t n, int all_logits, float* out,
                             size_t cap) {
  return guarded([&] {
    need(sess, "sess");
    if (n == 0) bad("n: no tokens to prefill (give at least one)");
    check_ids(ids, n, sess->vocab, "ids");
    need(out, "out");
    std::lock_guard<std::mutex> lock(*sess->mu);
    flashkit::Session& s = *sess->session;
    const int64_t pos = s.position(), ctx = s.max_context();
    if (n > size_t(ctx - pos))
      bad("n: " + std::to_string(n) + " tokens do not fit the session: position " + std::to_string(pos) + " + n > " +
          "max_context " + std::to_string(ctx) + " (" + std::to_string(ctx - pos) + " positions left)");
    const size_t V = size_t(sess->vocab), need_floats = all_logits ? n * V : V;
    if (cap < need_floats)
      bad("cap: out holds " + std::to_string(cap) + " floats but " +
          (all_logits ? std::to_string(n) + " rows x vocabulary " + std::to_string(V) + " need "
                      : std::string("the vocabulary has ")) +
          std::to_string(need_floats) + "; pass cap >= " + std::to_string(need_floats));
    s.prefill(std::span<const int32_t>(ids, n), all_logits != 0);
    if (all_logits) {
      const std::vector<float>& a = s.all_logits();
      if (a.size() != need_floats)
        flashkit::fail(Status::internal, "fk_session_prefill: the engine returned " + std::to_string(a.size()) +
                                             " logits, expected " + std::to_string(need_floats));
      std::memcpy(out, a.data(), need_floats * sizeof(float));
    } else {
      const std::span<const float> l = s.logits();
      std::memcpy(out, l.data(), V * sizeof(float));
    }
  });
}

fk_status fk_session_decode(fk_session* sess, int32_t token, float* out, size_t cap) {
  return guarded([&] {
    need(sess, "sess");
    if (token < 0 || token >= sess->vocab)
      bad("token: token id " + std::to_string(token) + " is outside the vocabulary [0, " +
          std::to_string(sess->vocab) + ")");
    need(out, "out");
    if (cap < size_t(sess->vocab))
      bad("cap: out holds " + std::to_string(cap) + " floats but the vocabulary has " + std::to_string(sess->vocab) +
          "; pass cap >= " + std::to_string(sess->vocab));
    std::lock_guard<std::mutex> lock(*sess->mu);
    flashkit::Session& s = *sess->session;
    if (s.position() >= s.max_context())
      bad("token: the session is full: position " + std::to_string(s.position()) + " = max_context " +
          std::to_string(s.max_context()) + " (fk_session_reset empties it)");
    s.decode(token);
    const std::span<const float> l = s.logits();
    std::memcpy(out, l.data(), l.size() * sizeof(float));
  });
}

fk_status fk_session_position(const fk_session* sess, int64_t* out) {
  return guarded([&] {
    need(sess, "sess");
    need(out, "out");
    std::lock_guard<std::mutex> lock(*sess->mu);
    *out = sess->session->position();
  });
}

fk_status fk_session_max_context(const fk_session* sess, int64_t* out) {
  return guarded([&] {
    need(sess, "sess");
    need(out, "out");
    *out = sess->session->max_context();
  });
}

fk_status fk_session_reset(fk_session* sess) {
  return guarded([&] {
    need(sess, "sess");
    std::lock_guard<std::mutex> lock(*sess->mu);
    sess->session->reset();
  });
}

}  // extern "C"
