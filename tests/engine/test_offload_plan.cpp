// CPU offload of weights (docs/serving.md "CPU offload"): the pure plan (how many of the last layers live in pinned
// host memory, the device and host bytes), the --gpu-memory byte parser, and the load options' errors. The CUDA side
// (offloaded logits bitwise equal to the resident model) is tests/engine/test_cuda_offload.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/offload_plan.hpp"
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

}  // namespace
