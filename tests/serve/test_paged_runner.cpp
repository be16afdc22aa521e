// engine::PagedRunner against a session: the logits of a batched step (two sequences with scattered blocks, one
// decoding, one computing a prompt chunk) equal the session's logits for the same tokens, within f32 summation-order
// differences. Catches wrong positions, slots or masks that greedy argmax comparisons could miss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "engine/paged.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"

namespace {

using namespace flashkit::engine;

double rel(const float* a, const float* b, int64_t n) {
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += double(b[i]) * b[i];
  }
  return std::sqrt(d / r);
}

TEST(PagedRunner, StepLogitsMatchSessions) {
  for (const char* name : {"tiny-gemma3", "tiny-llama"}) {
    auto model = flashkit::Model::load(std::string(FLASHKIT_TEST_DATA) + "/models/" + name,
                                       {.dtype = "f32", .threads = 1, .max_context = 128});
    const int64_t V = model->info().vocab_size, bs = 4;
    auto runner = make_paged_runner(*model, {.block_size = bs, .num_blocks = 40, .max_rows = 64, .max_seqs = 4});
    const int64_t MB = runner->max_blocks_per_seq();
    std::mt19937 rng(3);
    std::vector<int32_t> a(23), b(30);
    for (auto& t : a) t = int32_t(rng() % uint32_t(V));
    for (auto& t : b) t = int32_t(rng() % uint32_t(V));
    // Blocks handed out in a scrambled order: a gets the odd ids, b the even ones, from the top.
    std::vector<int32_t> table(size_t(2 * MB), 0);
    for (int64_t i = 0; i < 8; ++i) table[size_t(i)] = int32_t(39 - 2 * i);
    for (int64_t i = 0; i < 9; ++i) table[size_t(MB + i)] = int32_t(38 - 2 * i);
    // Step 1: a's first 22 tokens alone. Step 2: a's last token (decode) and b's first 30 tokens (a chunk).
    std::vector<float> l1(static_cast<size_t>(V)), l2(static_cast<size_t>(2 * V));
    {
      std::vector<int32_t> pos(22), seq(22, 0), rows = {21};
      std::iota(pos.begin(), pos.end(), 0);
      PagedStep st;
      st.tokens = std::span<const int32_t>(a).subspan(0, 22);
      st.positions = pos;
      st.row_seq = seq;
      st.block_tables = std::span<const int32_t>(table).subspan(0, size_t(MB));
      st.logit_rows = rows;
      st.num_seqs = 1;
      st.max_blocks = MB;
      runner->step(st, l1.data());
    }
    {
      std::vector<int32_t> tokens = {a[22]}, pos = {22}, seq = {0}, rows = {0, 30};
      for (int64_t i = 0; i < 30; ++i) {
        tokens.push_back(b[size_t(i)]);
        pos.push_back(int32_t(i));
        seq.push_back(1);
      }
      PagedStep st;
      st.tokens = tokens;
      st.positions = pos;
      st.row_seq = seq;
      st.block_tables = table;
      st.logit_rows = rows;
      st.num_seqs = 2;
      st.max_blocks = MB;
      runner->step(st, l2.data());
    }
    auto sa = model->new_session();
    sa->prefill(std::span<const int32_t>(a).subspan(0, 22));
    EXPECT_LT(rel(l1.data(), sa->logits().data(), V), 1e-5) << name << ": a after its prompt";
    sa->decode(a[22]);
    EXPECT_LT(rel(l2.data(), sa->logits().data(), V), 1e-5) << name << ": a's decode row";
    auto sb = model->new_session();
    sb->prefill(b);
    EXPECT_LT(rel(l2.data() + V, sb->logits().data(), V), 1e-5) << name << ": b's chunk";
  }
}

TEST(PagedRunner, RejectsStepsThatDoNotMatchItsSizes) {
  auto model = flashkit::Model::load(std::string(FLASHKIT_TEST_DATA) + "/models/tiny-llama",
                                     {.dtype = "f32", .threads = 1, .max_context = 64});
  EXPECT_THROW(make_paged_runner(*model, {.block_size = 0, .num_blocks = 4}), flashkit::Error);
  EXPECT_THROW(make_paged_runner(*model, {.block_size = 16, .num_blocks = 0}), flashkit::Error);
  auto runner = make_paged_runner(*model, {.block_size = 16, .num_blocks = 4, .max_rows = 8, .max_seqs = 2});
  std::vector<int32_t> tokens(9, 1), pos(9, 0), seq(9, 0), table(size_t(runner->max_blocks_per_seq()), 0);
  PagedStep st;
  st.tokens = tokens;
  st.positions = pos;
  st.row_seq = seq;
  st.block_tables = table;
  st.num_seqs = 1;
  st.max_blocks = runner->max_blocks_per_seq();
  std::vector<float> logits(size_t(2 * model->info().vocab_size));
  EXPECT_THROW(runner->step(st, logits.data()), flashkit::Error) << "9 rows, the runner takes 8";
  std::vector<ArgmaxResult> ids(1);
  EXPECT_THROW(runner->step_greedy(st, ids), flashkit::Error) << "one result per logit row";
}

// A greedy step gives the argmax of the logits the same step delivers (the serving engine's greedy path; on the
// CPU backend through the runner's host reduction), and logits_row() the step's rows.
TEST(PagedRunner, GreedyStepIsTheArgmaxOfTheStepsLogits) {
  auto model = flashkit::Model::load(std::string(FLASHKIT_TEST_DATA) + "/models/tiny-llama",
                                     {.dtype = "f32", .threads = 1, .max_context = 64});
  const int64_t V = model->info().vocab_size;
  auto runner = make_paged_runner(*model, {.block_size = 4, .num_blocks = 16, .max_rows = 16, .max_seqs = 3});
  const int64_t MB = runner->max_blocks_per_seq();
  std::vector<int32_t> tokens = {5, 9, 2, 7, 11, 3}, pos = {0, 1, 2, 0, 1, 0}, seq = {0, 0, 0, 1, 1, 2};
  std::vector<int32_t> rows = {2, 4, 5}, table(size_t(3 * MB), 0);
  table[0] = 3, table[size_t(MB)] = 8, table[size_t(2 * MB)] = 1;
  PagedStep st;
  st.tokens = tokens, st.positions = pos, st.row_seq = seq, st.block_tables = table, st.logit_rows = rows;
  st.num_seqs = 3, st.max_blocks = MB;
  std::vector<float> logits(static_cast<size_t>(3 * V));
  runner->step(st, logits.data());
  std::vector<ArgmaxResult> ids(3);
  runner->step_greedy(st, ids);  // the same rows again: same keys and values, same logits
  std::vector<float> row(static_cast<size_t>(V));
  for (int64_t i = 0; i < 3; ++i) {
    const float* l = logits.data() + i * V;
    const int64_t best = std::max_element(l, l + V) - l;  // the first maximum
    EXPECT_TRUE(ids[size_t(i)].valid);
    EXPECT_EQ(ids[size_t(i)].index, best) << "row " << i;
    runner->logits_row(i, row.data());
    EXPECT_EQ(std::vector<float>(l, l + V), row) << "row " << i;
  }
  EXPECT_THROW(runner->logits_row(3, row.data()), flashkit::Error);
}

}  // namespace
