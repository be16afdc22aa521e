// Batched serving on the CUDA backend: a paged step's logits against the same sequences run alone in sessions (CUDA
// and CPU), and the serve engine's greedy output (chunked prompts, preemption, prefix cache) token for token against
// generate() alone on the shipped models/draft. Skips when no CUDA device is visible (CI has none).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/paged.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/serve.hpp"

namespace {

using namespace flashkit::engine;
using flashkit::Model;

bool have_cuda() { return flashkit::cuda_device_count() > 0; }
#define NEED_CUDA() \
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)"

double rel(const float* a, const float* b, int64_t n) {
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += double(b[i]) * b[i];
  }
  return std::sqrt(d / r);
}

std::shared_ptr<Model> load(const std::string& dir, const char* device, const char* dtype, int64_t ctx) {
  flashkit::LoadOptions o;
  o.device = device;
  o.dtype = dtype;
  o.threads = 1;
  o.max_context = ctx;
  return Model::load(dir, o);
}

std::shared_ptr<Model> load_tuned(const std::string& dir, const char* dtype, int64_t ctx, bool flash_chunks) {
  flashkit::LoadOptions o;
  o.device = "cuda";
  o.dtype = dtype;
  o.threads = 1;
  o.max_context = ctx;
  flashkit::Tuning t = flashkit::default_tuning();
  t.paged_flash_chunks = flash_chunks;
  o.tuning = t;
  return Model::load(dir, o);
}

// Three sequences with scrambled blocks: a's prompt and c's (two chunks) in one step, then a's decode row, b's whole
// prompt (a chunk) and c's decode row in one step (decode rows on both sides of a chunk); the logits of each
// against sessions on the CUDA backend and on the CPU backend. Chunks take the flash kernel over their gathered keys
// (engine/paged_spans.hpp), and with FLASHKIT_PAGED_FLASH=0 the paged decode kernel row by row: both are checked.
// Gemma 3's fixture has sliding-window layers, q/k norms and softcaps; the bf16 models keep a bf16 pool and bf16
// activations.
TEST(CudaServe, PagedStepLogitsMatchSessions) {
  NEED_CUDA();
  const std::string data = std::string(FLASHKIT_TEST_DATA) + "/models/";
  for (const char* name : {"tiny-gemma3", "tiny-llama"})
    for (const char* dtype : {"f32", "bf16"})
      for (bool flash_chunks : {true, false}) {
        auto model = load_tuned(data + name, dtype, 256, flash_chunks);
        auto cpu = load(data + name, "cpu", "f32", 256);
        const int64_t V = model->info().vocab_size, bs = 16;
        auto runner = make_paged_runner(*model, {.block_size = bs, .num_blocks = 40, .max_rows = 160, .max_seqs = 4});
        const int64_t MB = runner->max_blocks_per_seq();
        std::mt19937 rng(3);
        std::vector<int32_t> a(71), b(130), c(21);
        for (auto& t : a) t = int32_t(rng() % uint32_t(V));
        for (auto& t : b) t = int32_t(rng() % uint32_t(V));
        for (auto& t : c) t = int32_t(rng() % uint32_t(V));
        std::vector<int32_t> table(size_t(3 * MB), 0);
        for (int64_t i = 0; i < 5; ++i) table[size_t(i)] = int32_t(39 - 2 * i);
        for (int64_t i = 0; i < 9; ++i) table[size_t(MB + i)] = int32_t(38 - 2 * i);
        for (int64_t i = 0; i < 2; ++i) table[size_t(2 * MB + i)] = int32_t(2 + 3 * i);
        std::vector<float> l1(static_cast<size_t>(2 * V)), l2(static_cast<size_t>(3 * V));
        {
          std::vector<int32_t> tokens, pos, seq, rows = {69, 89};
          for (int64_t i = 0; i < 70; ++i) tokens.push_back(a[size_t(i)]), pos.push_back(int32_t(i)), seq.push_back(0);
          for (int64_t i = 0; i < 20; ++i) tokens.push_back(c[size_t(i)]), pos.push_back(int32_t(i)), seq.push_back(1);
          std::vector<int32_t> t2(size_t(2 * MB));
          std::copy(table.begin(), table.begin() + MB, t2.begin());
          std::copy(table.begin() + 2 * MB, table.end(), t2.begin() + MB);
          PagedStep st;
          st.tokens = tokens, st.positions = pos, st.row_seq = seq, st.logit_rows = rows, st.block_tables = t2;
          st.num_seqs = 2, st.max_blocks = MB;
          runner->step(st, l1.data());
        }
        {
          std::vector<int32_t> tokens = {a[70]}, pos = {70}, seq = {0}, rows = {0, 130, 131};
          for (int64_t i = 0; i < 130; ++i) tokens.push_back(b[size_t(i)]), pos.push_back(int32_t(i)), seq.push_back(1);
          tokens.push_back(c[20]), pos.push_back(20), seq.push_back(2);
          PagedStep st;
          st.tokens = tokens, st.positions = pos, st.row_seq = seq, st.block_tables = table, st.logit_rows = rows;
          st.num_seqs = 3, st.max_blocks = MB;
          runner->step(st, l2.data());
        }
        const std::string what = std::string(name) + " " + dtype + (flash_chunks ? " (flash chunks)" : " (decode chunks)");
        for (Model* m : {model.get(), cpu.get()}) {
          const std::string on = m == cpu.get() ? " vs the CPU session" : " vs the CUDA session";
          auto sa = m->new_session();
          sa->prefill(std::span<const int32_t>(a).subspan(0, 70));
          EXPECT_LT(rel(l1.data(), sa->logits().data(), V), 3e-2) << what << on << ": a after its prompt";
          sa->decode(a[70]);
          EXPECT_LT(rel(l2.data(), sa->logits().data(), V), 3e-2) << what << on << ": a's decode row";
          auto sb = m->new_session();
          sb->prefill(b);
          EXPECT_LT(rel(l2.data() + V, sb->logits().data(), V), 3e-2) << what << on << ": b's chunk";
          auto sc = m->new_session();
          sc->prefill(std::span<const int32_t>(c).subspan(0, 20));
          EXPECT_LT(rel(l1.data() + V, sc->logits().data(), V), 3e-2) << what << on << ": c after its prompt";
          sc->decode(c[20]);
          EXPECT_LT(rel(l2.data() + 2 * V, sc->logits().data(), V), 3e-2) << what << on << ": c's decode row after b's chunk";
        }
      }
}

// The greedy step on CUDA: the device's per-row argmax (argmax_rows) against the host argmax of the logits of the same
// step run again (same keys and values: the same logits), and logits_row() against those logits.
TEST(CudaServe, GreedyStepIsTheArgmaxOfTheStepsLogits) {
  NEED_CUDA();
  auto model = load(std::string(FLASHKIT_TEST_DATA) + "/models/tiny-gemma3", "cuda", "bf16", 128);
  const int64_t V = model->info().vocab_size;
  auto runner = make_paged_runner(*model, {.block_size = 16, .num_blocks = 16, .max_rows = 64, .max_seqs = 3});
  ASSERT_TRUE(runner->greedy_allowed());
  const int64_t MB = runner->max_blocks_per_seq();
  std::vector<int32_t> tokens, pos, seq, rows = {39, 40, 41}, table(size_t(3 * MB), 0);
  for (int i = 0; i < 40; ++i) tokens.push_back(3 + i), pos.push_back(i), seq.push_back(0);
  tokens.push_back(7), pos.push_back(0), seq.push_back(1);
  tokens.push_back(9), pos.push_back(0), seq.push_back(2);
  table[0] = 5, table[1] = 2, table[2] = 11, table[size_t(MB)] = 0, table[size_t(2 * MB)] = 15;
  PagedStep st;
  st.tokens = tokens, st.positions = pos, st.row_seq = seq, st.block_tables = table, st.logit_rows = rows;
  st.num_seqs = 3, st.max_blocks = MB;
  std::vector<float> logits(static_cast<size_t>(3 * V)), row(static_cast<size_t>(V));
  runner->step(st, logits.data());
  std::vector<ArgmaxResult> ids(3);
  runner->step_greedy(st, ids);
  for (int64_t i = 0; i < 3; ++i) {
    const float* l = logits.data() + i * V;
    EXPECT_TRUE(ids[size_t(i)].valid);
    EXPECT_EQ(ids[size_t(i)].index, std::max_element(l, l + V) - l) << "row " << i;
    runner->logits_row(i, row.data());
    EXPECT_EQ(std::vector<float>(l, l + V), row) << "row " << i;
  }
}

// Paged steps are captured as CUDA graphs per shape (rows, logit rows, greedy) the second time a shape runs, and
// replayed after: the replays must read this step's tokens, positions and block tables, not the captured step's.
// Steps of one shape with new positions and tokens (and a block crossing), graphs on against graphs off.
TEST(CudaServe, CapturedPagedStepsMatchEagerSteps) {
  NEED_CUDA();
  const std::string dir = std::string(FLASHKIT_TEST_DATA) + "/models/tiny-gemma3";
  auto run = [&](bool graphs) {
    flashkit::LoadOptions o;
    o.device = "cuda";
    o.dtype = "bf16";
    o.max_context = 128;
    o.tuning = flashkit::default_tuning();
    o.tuning->cuda_graphs = graphs;
    auto model = Model::load(dir, o);
    const int64_t V = model->info().vocab_size;
    auto runner = make_paged_runner(*model, {.block_size = 4, .num_blocks = 32, .max_rows = 16, .max_seqs = 2});
    const int64_t MB = runner->max_blocks_per_seq();
    std::vector<int32_t> table(size_t(2 * MB), 0);
    for (int64_t i = 0; i < MB; ++i) table[size_t(i)] = int32_t(31 - i), table[size_t(MB + i)] = int32_t(i);
    std::vector<std::vector<float>> out;
    std::vector<ArgmaxResult> ids(2);
    for (int32_t step = 0; step < 7; ++step) {  // sequence 0 at positions 0.., sequence 1 at 3.. (after 3 rows)
      std::vector<int32_t> tokens = {5 + step, 11 + 2 * step}, pos = {step, 3 + step}, seq = {0, 1}, rows = {0, 1};
      if (step == 0) tokens = {5, 1, 2, 3, 11}, pos = {0, 0, 1, 2, 3}, seq = {0, 1, 1, 1, 1}, rows = {0, 4};
      PagedStep st;
      st.tokens = tokens, st.positions = pos, st.row_seq = seq, st.block_tables = table, st.logit_rows = rows;
      st.num_seqs = 2, st.max_blocks = MB;
      std::vector<float> l(static_cast<size_t>(2 * V));
      if (step % 3 == 2) {  // a greedy step now and then: its own shape key
        runner->step_greedy(st, ids);
        l.assign(size_t(2), 0.0f);
        l[0] = float(ids[0].index + 1), l[1] = float(ids[1].index + 1);  // (+1: never an all-zero row)
      } else {
        runner->step(st, l.data());
      }
      out.push_back(l);
    }
    return out;
  };
  const auto eager = run(false), graphs = run(true);
  ASSERT_EQ(eager.size(), graphs.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    ASSERT_EQ(eager[i].size(), graphs[i].size());
    EXPECT_LT(rel(graphs[i].data(), eager[i].data(), int64_t(eager[i].size())), 1e-6) << "step " << i;
  }
}

std::vector<int32_t> alone(Model& m, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  auto s = m.new_session();
  flashkit::GenerateOptions g;
  g.max_new_tokens = max_tokens;
  g.temperature = 0;
  g.stop_at_eos = false;
  return flashkit::generate(*s, prompt, g).tokens;
}

// Greedy tokens `got` against the same prompt generated alone: equal, or equal up to a position where the alone run's
// own logits put got's token within kTie of the best one (a near-tie: the session's flash prefill rounds q/k/v to
// bf16, the paged kernel does not, and either choice is then greedy). A real error picks a token far from the best.
void expect_same_greedy(Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& got,
                        int64_t max_tokens, const std::string& what) {
  constexpr float kTie = 0.05f;
  const std::vector<int32_t> want = alone(m, prompt, max_tokens);
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == want.size() && got.size() == want.size()) return;
  ASSERT_LT(i, got.size()) << what << ": " << got.size() << " tokens, expected " << want.size();
  std::vector<int32_t> ctx = prompt;
  ctx.insert(ctx.end(), want.begin(), want.begin() + std::ptrdiff_t(i));
  auto s = m.new_session();
  s->prefill(ctx);
  const std::span<const float> lg = s->logits();
  const float best = *std::max_element(lg.begin(), lg.end());
  EXPECT_LT(best - lg[size_t(got[i])], kTie)
      << what << ": token " << i << " is " << got[i] << " (logit " << lg[size_t(got[i])] << "), alone " << want[i]
      << " (best logit " << best << "): not a near-tie";
}

// The scheduler on the CUDA backend: requests of many lengths (chunked prompts longer than the step budget), a pool
// too small for all of them (preemption by recomputation), then the same prompts behind a shared prefix (prefix-cache
// hits). Greedy output must be what each request gets alone. f32 activations and pool (weights are bf16 on the GPU
// either way): the session's prefill rounds q/k/v to bf16 for the flash kernel, the paged kernel does not, and bf16
// activations would make near-ties of a greedy choice flip between the two paths.
TEST(CudaServe, GreedyRequestsMatchGenerateAloneOnDraft) {
  NEED_CUDA();
  // The draft, not the target: the target's weights stay off the GPU machine's copy of the tree (its size limit).
  const std::string dir = std::string(FLASHKIT_TEST_DATA) + "/../../models/draft";
  auto model = load(dir, "cuda", "f32", 512);
  const int64_t V = model->info().vocab_size;
  std::mt19937 rng(7);
  std::vector<int32_t> prefix(48);
  for (auto& t : prefix) t = int32_t(2 + rng() % uint32_t(V - 2));
  for (bool shared : {false, true}) {
    const int64_t lens[] = {1, 3, 16, 17, 40, 70, 5, 129, 31, 2, 64, 90};
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int64_t> max_tokens;
    for (int i = 0; i < 12; ++i) {
      std::vector<int32_t> p = shared ? prefix : std::vector<int32_t>{};
      for (int64_t t = 0; t < lens[i]; ++t) p.push_back(int32_t(2 + rng() % uint32_t(V - 2)));
      prompts.push_back(p);
      max_tokens.push_back(4 + (i * 7) % 29);
    }
    flashkit::serve::EngineOptions o;
    o.background = false;
    o.block_size = 16;
    o.max_step_tokens = 48;
    o.max_running = 8;
    o.kv_memory = paged_kv_bytes_per_token(*model) * 16 * (shared ? 40 : 14);
    auto e = flashkit::serve::Engine::create(model, o);
    std::vector<std::vector<int32_t>> out(prompts.size());
    std::vector<flashkit::serve::RequestResult> res(prompts.size());
    auto submit = [&](size_t i) {
      flashkit::serve::Request r;
      r.prompt = prompts[i];
      r.max_tokens = max_tokens[i];
      r.sampling.temperature = 0;
      r.stop_at_eos = false;
      r.on_token = [&out, i](int32_t t) {
        out[i].push_back(t);
        return true;
      };
      r.on_done = [&res, i](const flashkit::serve::RequestResult& x) { res[i] = x; };
      e->submit(std::move(r));
    };
    for (size_t i = 0; i < 6; ++i) submit(i);
    for (int k = 0; k < 3; ++k) e->step();
    for (size_t i = 6; i < prompts.size(); ++i) submit(i);
    e->wait_idle();
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_NE(res[i].finish_reason, "error") << res[i].error;
      expect_same_greedy(*model, prompts[i], out[i], max_tokens[i],
                         std::string(shared ? "shared prefix, " : "") + "request " + std::to_string(i) + " prompt " +
                             std::to_string(prompts[i].size()));
    }
    const auto st = e->stats();
    if (!shared) {
      EXPECT_GT(st.preemptions, 0) << "the pool was meant to be too small for all requests at once";
    }
    EXPECT_EQ(st.kv_blocks_used, 0);
  }
}

// n-gram speculation on the CUDA backend (EngineOptions::spec_lookup): prompts that repeat a phrase, several
// requests at once, a pool small enough to preempt; greedy output as alone (near-ties allowed as above), proposals
// accepted and rejected, every block free at the end.
TEST(CudaServe, SpeculativeGreedyRequestsMatchGenerateAloneOnDraft) {
  NEED_CUDA();
  const std::string dir = std::string(FLASHKIT_TEST_DATA) + "/../../models/draft";
  auto model = load(dir, "cuda", "f32", 512);
  const int64_t V = model->info().vocab_size;
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> max_tokens;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> phrase;
    for (int t = 0; t < 4 + i % 5; ++t) phrase.push_back(int32_t(2 + rng() % uint32_t(V - 2)));
    std::vector<int32_t> p;
    for (int r = 0; r < 2 + i % 3; ++r) p.insert(p.end(), phrase.begin(), phrase.end());
    p.push_back(phrase[0]);
    prompts.push_back(p);
    max_tokens.push_back(16 + (i * 9) % 40);
  }
  flashkit::serve::EngineOptions o;
  o.background = false;
  o.block_size = 16;
  o.max_step_tokens = 64;
  o.max_running = 8;
  o.kv_memory = paged_kv_bytes_per_token(*model) * 16 * 12;
  o.spec_lookup = 3;
  o.spec_tokens = 4;
  o.spec_max_batch = 8;
  auto e = flashkit::serve::Engine::create(model, o);
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<flashkit::serve::RequestResult> res(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    flashkit::serve::Request r;
    r.prompt = prompts[i];
    r.max_tokens = max_tokens[i];
    r.sampling.temperature = 0;
    r.stop_at_eos = false;
    r.on_token = [&out, i](int32_t t) {
      out[i].push_back(t);
      return true;
    };
    r.on_done = [&res, i](const flashkit::serve::RequestResult& x) { res[i] = x; };
    e->submit(std::move(r));
  }
  e->wait_idle();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_NE(res[i].finish_reason, "error") << res[i].error;
    expect_same_greedy(*model, prompts[i], out[i], max_tokens[i], "speculative request " + std::to_string(i));
  }
  const auto st = e->stats();
  EXPECT_GT(st.spec_accepted, 0);
  EXPECT_LT(st.spec_accepted, st.spec_proposed);
  EXPECT_EQ(st.kv_blocks_used, 0);
}

// The pool of a CUDA model defaults to a share of the free device memory, not of the host's.
TEST(CudaServe, DefaultPoolComesFromDeviceMemory) {
  NEED_CUDA();
  auto model = load(std::string(FLASHKIT_TEST_DATA) + "/models/tiny-llama", "cuda", "bf16", 4096);
  const int64_t free_now = paged_device_free_bytes(*model);
  EXPECT_GT(free_now, 0);
  flashkit::serve::EngineOptions o;
  o.max_running = int64_t(1) << 30;  // no cap from the sequences: the device share decides
  const int64_t bytes = flashkit::serve::default_kv_memory(*model, o);
  EXPECT_LE(bytes, free_now / 2 + (int64_t(64) << 20));
  EXPECT_GT(bytes, free_now / 5 * 2);
  auto cpu = load(std::string(FLASHKIT_TEST_DATA) + "/models/tiny-llama", "cpu", "f32", 256);
  EXPECT_EQ(paged_device_free_bytes(*cpu), -1);
}

}  // namespace
