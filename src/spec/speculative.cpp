#include "spec/speculative.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/plain_step.hpp"
#include "engine/sampler.hpp"
#include "flashkit/error.hpp"
#include "spec/adaptive.hpp"
#include "spec/draft.hpp"
#include "spec/ngram.hpp"
#include "spec/tree.hpp"

namespace flashkit {

// Session's speculative hooks for sessions that do not implement them (the engine's sessions do).
void Session::truncate(int64_t) { fail(Status::unsupported, "this session cannot roll back (truncate)"); }
int64_t Session::max_verify_rows() const { return 1; }
void Session::forward_all_logits(std::span<const int32_t>) {
  fail(Status::unsupported, "this session has no forward_all_logits");
}
void Session::forward_tree(std::span<const int32_t>, std::span<const int32_t>) {
  fail(Status::unsupported, "this session has no tree verification");
}
void Session::accept_tree_path(std::span<const int32_t>) {
  fail(Status::unsupported, "this session has no tree verification");
}

namespace spec {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

void validate(const Session& target, const SpeculativeOptions& so) {
  auto range = [](const char* name, int v, int lo, int hi) {
    if (v < lo || v > hi)
      bad(std::string("speculative: ") + name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
          "], got " + std::to_string(v));
  };
  range("draft_tokens", so.draft_tokens, 0, 64);
  range("max_draft_tokens", so.max_draft_tokens, 1, 64);
  range("lookup", so.lookup, 0, 64);
  range("tree_width", so.tree_width, 1, 64);
  if (so.tree_width > 1 && so.lookup == 0)
    bad("speculative: tree_width > 1 verifies several n-gram continuations as a tree; it needs lookup >= 1");
  if (so.draft == &target) bad("speculative: the draft session is the target session");
  if (so.draft) {
    const ModelInfo &t = target.model().info(), &d = so.draft->model().info();
    if (d.vocab_size > t.vocab_size)
      bad("speculative: the draft model's vocabulary (" + std::to_string(d.vocab_size) + ") is larger than the " +
          "target's (" + std::to_string(t.vocab_size) + "); draft and target must share a tokenizer");
    if (so.draft->position() != target.position())
      bad("speculative: the draft session holds " + std::to_string(so.draft->position()) +
          " tokens, the target session " + std::to_string(target.position()) + "; they must hold the same text");
  }
  if (target.max_verify_rows() < 2)
    bad("speculative: the target session verifies at most one row per step (LoadOptions::kv_ring_slack 0 with "
        "sliding-window layers, or prefill_chunk 1)");
}

}  // namespace

GenerationResult generate(Session& target, std::span<const int32_t> prompt, const GenerateOptions& opts,
                          const std::function<bool(int32_t)>& on_token, const TestHooks* hooks) {
  if (opts.max_new_tokens < 1)
    fail(Status::invalid_argument, "max_new_tokens must be at least 1, got " + std::to_string(opts.max_new_tokens));
  if (prompt.empty()) fail(Status::invalid_argument, "generate: the prompt is empty (give at least one token)");
  const SpeculativeOptions& so = opts.speculative;
  validate(target, so);
  const AcceptRule rule = hooks ? hooks->rule : AcceptRule::exact;
  const engine::SamplerParams sp = engine::sampler_params(opts);
  engine::Sampler sampler(sp);  // validates
  const bool greedy = sp.greedy();
  std::vector<int32_t> stops = opts.stop_ids;
  if (opts.stop_at_eos)
    for (int32_t e : target.model().info().eos_ids) stops.push_back(e);
  const int64_t V = target.model().info().vocab_size;
  const int64_t max_ctx = target.max_context();

  // K: fixed, or adaptive between 1 and max_draft_tokens; never more than one step can roll back.
  const int k_cap = int(std::min<int64_t>(64, target.max_verify_rows() - 1));
  const bool adaptive = so.draft_tokens == 0;
  const int k_max = std::min(k_cap, adaptive ? so.max_draft_tokens : so.draft_tokens);
  StepModel steps(adaptive ? std::min(4, k_max) : k_max, k_max, adaptive);
  const bool tree = so.lookup > 0 && so.tree_width > 1 && target.supports_tree();

  GenerationResult r;
  SpecStats& st = r.spec;
  st.proposer = so.lookup > 0 ? (so.tree_width > 1 ? (tree ? "ngram-tree" : "ngram-tree(chain: no tree on this backend)")
                                                   : "ngram")
                              : "";
  if (so.draft) st.proposer += st.proposer.empty() ? "draft" : "+draft";
  st.k_histogram.assign(size_t(k_max) + 1, 0);

  r.prompt_tokens = int64_t(prompt.size());
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  const int64_t base = target.position();
  const auto t0 = Clock::now();
  target.prefill(prompt);
  r.prefill_s = since(t0);
  const int32_t first = sampler.sample(target.logits(), history);
  r.time_to_first_token_s = since(t0);
  const auto td = Clock::now();
  r.stop_reason = "length";

  // Hands a token out; false when generation ends (the same checks, in the same order, as generate()).
  auto emit = [&](int32_t tok) {
    r.tokens.push_back(tok);
    history.push_back(tok);
    if (on_token && !on_token(tok)) {
      r.stop_reason = "callback";
      return false;
    }
    if (std::find(stops.begin(), stops.end(), tok) != stops.end()) {
      r.stop_reason = "eos";
      return false;
    }
    if (int64_t(r.tokens.size()) >= opts.max_new_tokens) return false;
    if (base + int64_t(prompt.size()) + int64_t(r.tokens.size()) - 1 >= max_ctx) {
      r.stop_reason = "context";
      return false;
    }
    return true;
  };

  engine::DeviceGreedy* fast = engine::device_greedy(target, sp);
  std::optional<DraftProposer> draft;
  if (so.draft) draft.emplace(*so.draft, sp, V);
  Dist p;
  std::vector<Dist> q;
  std::vector<int32_t> ctx, path;
  bool going = emit(first);
  while (going) {
    const int64_t pos0 = target.position();
    const int32_t pending = history.back();
    const int64_t remaining = opts.max_new_tokens - int64_t(r.tokens.size());
    const int k = int(std::max<int64_t>(0, std::min<int64_t>({steps.next_k(), remaining - 1, max_ctx - pos0 - 1})));

    // Propose: n-gram candidates first, the draft model when they find nothing.
    auto tp = Clock::now();
    TokenTree tt(pending);
    bool drafted = false;
    if (k > 0 && so.lookup > 0) {
      const auto cands = ngram_candidates(history, so.lookup, k, tree ? so.tree_width : 1);
      for (const auto& c : cands) tt.insert(c, target.max_verify_rows());
    }
    if (k > 0 && tt.size() == 1 && draft) {
      const auto d = draft->propose(history, k, sampler, greedy ? nullptr : &q);
      tt.insert(d, int64_t(d.size()) + 1);
      drafted = !greedy;
    }
    const double prop_s = since(tp);

    // Nothing proposed (K = 0, or no candidate): a plain decode step, generate()'s own path -- on CUDA the decode
    // graph with the device argmax, much cheaper than a one-row verification (its logits row is downloaded).
    if (tt.size() == 1) {
      auto tv = Clock::now();
      const int32_t tok = engine::plain_decode_step(target, fast, sampler, sp, history, pending);
      const double dec_s = since(tv);
      st.steps += 1;
      st.proposer_s += prop_s;
      st.verifier_s += dec_s;
      st.k_histogram[0] += 1;
      steps.update(0, 0, prop_s, dec_s, 1);
      going = emit(tok);
      st.emitted += 1;
      continue;
    }

    // Verify: one target forward over the pending token and every proposal.
    auto tv = Clock::now();
    const bool chain = tt.is_chain();
    if (chain) target.forward_all_logits(tt.token);
    else target.forward_tree(tt.token, tt.parent);
    const std::vector<float>& rows = target.all_logits();
    const double ver_s = since(tv);

    // Walk the proposals from the root while the target agrees.
    auto ta = Clock::now();
    ctx = history;
    path.assign(1, 0);
    int32_t node = 0, final_tok = -1;
    while (true) {
      const std::span<const float> row(rows.data() + int64_t(node) * V, size_t(V));
      const auto& kids = tt.children[size_t(node)];
      int32_t next = -1;
      if (greedy) {
        const int32_t y = sampler.sample(row, ctx);
        next = rule == AcceptRule::always_accept && !kids.empty() ? kids[0] : tt.child(node, y);
        if (next < 0) final_tok = y;
      } else {
        p.assign(sampler.distribution(row, ctx), V);
        if (kids.empty()) {
          final_tok = p.sample(sampler.next_uniform());
        } else if (drafted) {  // a draft-model chain: x ~ q
          const Verdict v = accept_draft(p, q[path.size() - 1], tt.token[size_t(kids[0])], sampler, rule);
          if (v.accepted) next = kids[0];
          else final_tok = v.token;
        } else {  // n-gram candidates: point masses, siblings in priority order
          std::vector<int32_t> cand;
          for (int32_t c : kids) cand.push_back(tt.token[size_t(c)]);
          int which = -1;
          const Verdict v = accept_candidates(p, cand, sampler, rule, &which);
          if (v.accepted) next = kids[size_t(which)];
          else final_tok = v.token;
        }
      }
      if (next < 0) break;
      path.push_back(next);
      ctx.push_back(tt.token[size_t(next)]);
      node = next;
    }
    if (chain) target.truncate(pos0 + int64_t(path.size()));
    else target.accept_tree_path(path);
    const double acc_s = since(ta);

    const int proposed = int(tt.size() - 1), accepted = int(path.size() - 1);
    st.steps += 1;
    st.proposed += proposed;
    st.accepted += accepted;
    st.proposer_s += prop_s;
    st.verifier_s += ver_s;
    st.sampling_s += acc_s;
    if (size_t(proposed) >= st.k_histogram.size()) st.k_histogram.resize(size_t(proposed) + 1, 0);
    st.k_histogram[size_t(proposed)] += 1;
    steps.update(int(tt.depth()), accepted, prop_s, ver_s, tt.size());

    for (size_t j = 1; j < path.size() && going; ++j) {
      going = emit(tt.token[size_t(path[j])]);
      st.emitted += 1;
    }
    if (going) {
      going = emit(final_tok);
      st.emitted += 1;
    }
  }
  // The cache holds what generate() leaves: the prompt and every output token but the last.
  const int64_t fed = base + int64_t(prompt.size()) + int64_t(r.tokens.size()) - 1;
  if (target.position() > fed) target.truncate(fed);
  if (draft) draft->finish(std::span<const int32_t>(history.data(), history.size() - 1));
  r.decode_s = since(td);
  r.decode_steps = int64_t(r.tokens.size()) - 1;
  if (steps.distinct_sizes() >= 2 && st.steps > 0) {
    const double per_step = (st.proposer_s + st.verifier_s + st.sampling_s) / double(st.steps);
    st.speedup_estimate = st.mean_accepted_length() * steps.plain_time() / std::max(per_step, 1e-12);
  }
  return r;
}

}  // namespace spec
}  // namespace flashkit
