// CPU offload of weights (docs/serving.md "CPU offload"): the pure plan (how many of the last layers live in pinned
// host memory, the device and host bytes), the copy schedule the CUDA backend follows (simulated: every rule a
// captured CUDA graph relies on), the --gpu-memory byte parser, and the load options' errors. The CUDA side
// (offloaded logits bitwise equal to the resident model) is tests/engine/test_cuda_offload.cpp.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "engine/offload_plan.hpp"
#include "engine/offload_schedule.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"

namespace {

using flashkit::engine::OffloadPlan;
using flashkit::engine::OffloadSizes;
using flashkit::engine::parse_byte_count;
using flashkit::engine::plan_offload_budget;
using flashkit::engine::plan_offload_layers;

const std::string kTinyLlama = std::string(FLASHKIT_TEST_DATA) + "/models/tiny-llama";

template <typename F>
std::string error_of(F&& f, flashkit::Status want) {
  try {
    f();
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), want) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

// Five layers of uneven sizes (the largest sets the slot), 1000 resident, KV 300, workspace 200.
struct Sizes {
  std::vector<int64_t> layers = {100, 110, 120, 130, 125};
  OffloadSizes s;
  Sizes() {
    s.layer_bytes = layers;
    s.resident_bytes = 1000, s.kv_bytes = 300, s.workspace_bytes = 200, s.slots = 2;
  }
};

TEST(OffloadPlan, FixedCountBytes) {
  Sizes z;
  const OffloadPlan p0 = plan_offload_layers(z.s, 0);
  EXPECT_EQ(p0.offloaded_layers, 0);
  EXPECT_EQ(p0.first_offloaded, 5);
  EXPECT_EQ(p0.slots, 0);
  EXPECT_EQ(p0.host_pinned_bytes, 0);
  EXPECT_EQ(p0.device_bytes, 1000 + 585 + 300 + 200);

  const OffloadPlan p1 = plan_offload_layers(z.s, 1);  // one layer: one slot (min(slots, n))
  EXPECT_EQ(p1.first_offloaded, 4);
  EXPECT_EQ(p1.slots, 1);
  EXPECT_EQ(p1.slot_bytes, 125);
  EXPECT_EQ(p1.host_pinned_bytes, 125);
  EXPECT_EQ(p1.device_bytes, 1000 + 460 + 125 + 500);

  const OffloadPlan p3 = plan_offload_layers(z.s, 3);  // layers 2, 3, 4: slot = the largest (130)
  EXPECT_EQ(p3.first_offloaded, 2);
  EXPECT_EQ(p3.slots, 2);
  EXPECT_EQ(p3.slot_bytes, 130);
  EXPECT_EQ(p3.host_pinned_bytes, 375);
  EXPECT_EQ(p3.device_bytes, 1000 + 210 + 260 + 500);

  const OffloadPlan p5 = plan_offload_layers(z.s, 5);
  EXPECT_EQ(p5.first_offloaded, 0);
  EXPECT_EQ(p5.host_pinned_bytes, 585);
  EXPECT_EQ(p5.device_bytes, 1000 + 260 + 500);

  z.s.slots = 3;
  EXPECT_EQ(plan_offload_layers(z.s, 5).device_bytes, 1000 + 390 + 500);
}

TEST(OffloadPlan, FixedCountOutOfRangeNamesTheOption) {
  Sizes z;
  for (int64_t n : {-1, 6, 1000}) {
    const std::string m = error_of([&] { plan_offload_layers(z.s, n); }, flashkit::Status::invalid_argument);
    EXPECT_NE(m.find("--offload-layers"), std::string::npos) << m;
    EXPECT_NE(m.find("0..5"), std::string::npos) << m;
  }
  z.s.slots = 0;
  error_of([&] { plan_offload_layers(z.s, 2); }, flashkit::Status::invalid_argument);
}

TEST(OffloadPlan, BudgetPicksTheFewestOffloadedLayers) {
  Sizes z;
  EXPECT_EQ(plan_offload_budget(z.s, 1 << 30).offloaded_layers, 0);  // everything fits
  EXPECT_EQ(plan_offload_budget(z.s, 2085).offloaded_layers, 0);     // exactly fits
  // 2084: one layer (1000 + 460 + 125 + 500 = 2085) does not fit either; two: 1000 + 330 + 2 * 130 + 500 = 2090 --
  // the slots make small counts no better, the first that fits is three (1970).
  EXPECT_EQ(plan_offload_budget(z.s, 2084).offloaded_layers, 3);
  EXPECT_EQ(plan_offload_budget(z.s, 1970).offloaded_layers, 3);
  EXPECT_EQ(plan_offload_budget(z.s, 1969).offloaded_layers, 4);  // 1000 + 100 + 260 + 500 = 1860
  EXPECT_EQ(plan_offload_budget(z.s, 1859).offloaded_layers, 5);  // 1760
  for (int64_t b = 1760; b < 3000; b += 7) {  // the plan always fits its budget, and fewer layers would not
    const OffloadPlan p = plan_offload_budget(z.s, b);
    EXPECT_LE(p.device_bytes, b);
    for (int64_t n = 0; n < p.offloaded_layers; ++n) EXPECT_GT(plan_offload_layers(z.s, n).device_bytes, b);
  }
}

TEST(OffloadPlan, BudgetTooSmallSaysWhatIsNeeded) {
  Sizes z;
  const std::string m = error_of([&] { plan_offload_budget(z.s, 1759); }, flashkit::Status::out_of_memory);
  for (const char* want : {"--gpu-memory", "1759", "all 5 layers", "KV cache", "too small"})
    EXPECT_NE(m.find(want), std::string::npos) << want << " in: " << m;
  for (int64_t b : {0, -5})
    error_of([&] { plan_offload_budget(z.s, b); }, flashkit::Status::invalid_argument);
}

TEST(OffloadPlan, ByteCounts) {
  EXPECT_EQ(parse_byte_count("0"), 0);
  EXPECT_EQ(parse_byte_count("1073741824"), 1073741824);
  EXPECT_EQ(parse_byte_count("64K"), 64 << 10);
  EXPECT_EQ(parse_byte_count("512M"), int64_t(512) << 20);
  EXPECT_EQ(parse_byte_count("24G"), int64_t(24) << 30);
  EXPECT_EQ(parse_byte_count("1.5GiB"), int64_t(3) << 29);
  EXPECT_EQ(parse_byte_count("2T"), int64_t(2) << 40);
  for (const char* bad : {"", " 5", "-1", "+5", "5X", "G", "nan", "inf", "0x10", "1e30", "5 G", "9e18K"})
    EXPECT_EQ(parse_byte_count(bad), -1) << bad;
}

TEST(OffloadPlan, LoadOptionErrors) {
  // Offload on the CPU device is refused by name (the weights are in host memory already).
  std::string m = error_of([] { flashkit::Model::load(kTinyLlama, {.offload_layers = 1}); },
                           flashkit::Status::invalid_argument);
  EXPECT_NE(m.find("--offload-layers"), std::string::npos) << m;
  EXPECT_NE(m.find("--device cuda"), std::string::npos) << m;
  flashkit::LoadOptions o;
  o.gpu_memory_bytes = int64_t(1) << 30;
  m = error_of([&] { flashkit::Model::load(kTinyLlama, o); }, flashkit::Status::invalid_argument);
  EXPECT_NE(m.find("--gpu-memory"), std::string::npos) << m;
  o = {};
  o.offload_layers = -2;
  m = error_of([&] { flashkit::Model::load(kTinyLlama, o); }, flashkit::Status::invalid_argument);
  EXPECT_NE(m.find("-2"), std::string::npos) << m;
  o = {};
  o.gpu_memory_bytes = -1;
  error_of([&] { flashkit::Model::load(kTinyLlama, o); }, flashkit::Status::invalid_argument);
  o = {};
  o.offload_layers = 1, o.gpu_memory_bytes = 1 << 30;
  m = error_of([&] { flashkit::Model::load(kTinyLlama, o); }, flashkit::Status::invalid_argument);
  EXPECT_NE(m.find("not both"), std::string::npos) << m;
  // Nothing offloaded: a plain CPU load.
  EXPECT_EQ(flashkit::Model::load(kTinyLlama, {.offload_layers = 0})->info().offloaded_layers, 0);
}

// Simulates passes of the backend against the schedule: per layer `linears` linear launches (each preceded by
// next_linear, as order_offload does before every group), then the lm_head's (layer -1). Checks, at every launch of
// an offloaded layer's linear, that the last copy issued into its slot is that layer's (so no copy for a later layer
// was issued while this one still had kernels to launch) and that the compute stream waited for it after it was
// issued; that each pass waits on every copy it issues (graph capture joins); and that passes from the second on
// issue identical actions (a captured pass replays correctly).
void simulate(int64_t layers, int64_t first, int slots, int linears) {
  using flashkit::engine::OffloadSchedule;
  using Action = OffloadSchedule::Action;
  OffloadSchedule sch(layers, first, slots);
  const int k = sch.slots();
  std::vector<int64_t> last_copy(size_t(k), -1);
  std::vector<bool> waited(size_t(k), false);
  std::vector<std::vector<Action>> passes;
  for (int pass = 0; pass < 5; ++pass) {
    std::vector<Action> all, a;
    std::vector<int> pending(size_t(k), 0);  // copies issued this pass and not yet waited on
    auto apply = [&] {
      for (const Action& x : a) {
        ASSERT_GE(x.slot, 0);
        ASSERT_LT(x.slot, k);
        ASSERT_TRUE(sch.offloaded(x.layer));
        ASSERT_EQ(x.slot, sch.slot_of(x.layer));
        if (x.kind == Action::copy) {
          last_copy[size_t(x.slot)] = x.layer, waited[size_t(x.slot)] = false, ++pending[size_t(x.slot)];
        } else {
          ASSERT_EQ(last_copy[size_t(x.slot)], x.layer);
          waited[size_t(x.slot)] = true, pending[size_t(x.slot)] = 0;
        }
      }
      all.insert(all.end(), a.begin(), a.end());
      a.clear();
    };
    sch.pass_start(a);
    apply();
    for (int64_t l = 0; l < layers; ++l)
      for (int i = 0; i < linears; ++i) {
        sch.next_linear(l, a);
        apply();
        if (sch.offloaded(l)) {
          const size_t s = size_t(sch.slot_of(l));
          ASSERT_EQ(last_copy[s], l) << "layer " << l << " pass " << pass;
          ASSERT_TRUE(waited[s]) << "layer " << l << " pass " << pass;
        }
      }
    sch.next_linear(-1, a);  // lm_head
    apply();
    for (int s = 0; s < k; ++s) EXPECT_EQ(pending[size_t(s)], 0) << "a copy not waited on in pass " << pass;
    passes.push_back(all);
  }
  const int64_t n = layers - first;
  for (size_t p = 2; p < passes.size(); ++p) {
    ASSERT_EQ(passes[p].size(), passes[1].size());
    for (size_t i = 0; i < passes[p].size(); ++i) {
      EXPECT_EQ(passes[p][i].kind, passes[1][i].kind);
      EXPECT_EQ(passes[p][i].layer, passes[1][i].layer);
    }
  }
  int64_t copies = 0;
  for (const Action& x : passes[1]) copies += x.kind == Action::copy;
  if (n >= 2 * k) EXPECT_EQ(copies, n);          // every offloaded layer streams every pass
  if (n <= k) EXPECT_EQ(copies, 0);              // each has a slot of its own: copied once
  EXPECT_LE(copies, n);
}

TEST(OffloadSchedule, EveryLayoutKeepsTheOrderingRules) {
  for (int64_t layers : {1, 2, 5, 6, 16})
    for (int64_t first = 0; first < layers; ++first)
      for (int slots : {1, 2, 3})
        for (int linears : {1, 4}) {
          SCOPED_TRACE("layers " + std::to_string(layers) + ", first " + std::to_string(first) + ", slots " +
                       std::to_string(slots) + ", linears " + std::to_string(linears));
          simulate(layers, first, slots, linears);
          if (testing::Test::HasFatalFailure()) return;
        }
}

TEST(OffloadSchedule, ForgetReloadsAndBadLayouts) {
  using flashkit::engine::OffloadSchedule;
  OffloadSchedule sch(4, 2, 2);  // layers 2, 3 in slots 0, 1: copied on the first pass only
  std::vector<OffloadSchedule::Action> a;
  sch.pass_start(a);
  EXPECT_EQ(a.size(), 2u);
  a.clear();
  sch.pass_start(a);
  EXPECT_TRUE(a.empty());
  sch.forget();  // a failed capture: the copies it recorded never ran
  sch.pass_start(a);
  EXPECT_EQ(a.size(), 2u);
  for (auto [layers, first, slots] : {std::tuple{0, 0, 2}, {4, 4, 2}, {4, -1, 2}, {4, 1, 0}})
    error_of([&] { OffloadSchedule(layers, first, slots); }, flashkit::Status::invalid_argument);
}

}  // namespace
