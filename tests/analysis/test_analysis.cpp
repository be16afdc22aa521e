// Unit tests of the analysis module: hardware table and roofline classification, GEMM/GEMV kernels against
// BLAS, model cost against hand-computed values, the attention IO model and teaching formulas, the
// profiler's trace, the GELU fusion example, and error handling.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "attention_io.hpp"
#include "demos.hpp"
#include "flashkit/error.hpp"
#include "gemm.hpp"
#include "gpu_demos.hpp"
#include "hardware.hpp"
#include "model_cost.hpp"
#include "profiler.hpp"
#include "roofline.hpp"

namespace an = flashkit::analysis;
using nlohmann::json;

namespace {
std::string cfg(const char* name) { return std::string(FLASHKIT_SOURCE_DIR) + "/models/configs/" + name; }

template <class F>
flashkit::Status status_of(F f) {
  try {
    f();
  } catch (const flashkit::Error& e) {
    return e.status();
  }
  return flashkit::Status::ok;
}
}  // namespace

TEST(Hardware, TableHasIssueDevicesWithSources) {
  for (const char* n : {"t4", "l4", "a10", "a100-40gb", "a100-80gb", "a6000", "h100-sxm", "h100-pcie", "h200", "b200"}) {
    const an::DeviceSpec d = an::find_device(n);
    EXPECT_GT(d.fp32_tflops, 0) << n;
    EXPECT_GT(d.mem_bw_gbs, 0) << n;
    EXPECT_GT(d.sms, 0) << n;
    EXPECT_GT(d.smem_per_sm_kb, 0) << n;
    EXPECT_FALSE(d.source.empty()) << n;
  }
  EXPECT_DOUBLE_EQ(an::find_device("H200").mem_bw_gbs, 4800);
  EXPECT_DOUBLE_EQ(an::find_device("t4").fp32_tflops, 8.1);
}

TEST(Hardware, UnknownDeviceListsValidNames) {
  try {
    an::find_device("x100");
    FAIL();
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("h200"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("x100"), std::string::npos);
  }
}

TEST(Hardware, PeakFallsBackToAvailableFormat) {
  std::string used;
  EXPECT_DOUBLE_EQ(an::peak_tflops(an::find_device("t4"), "bf16", &used), 65);  // T4: no bf16, f16 tensor cores
  EXPECT_EQ(used, "f16");
  EXPECT_DOUBLE_EQ(an::peak_tflops(an::find_device("a100-80gb"), "fp8", &used), 312);
  EXPECT_EQ(used, "bf16");
  EXPECT_DOUBLE_EQ(an::peak_tflops(an::find_device("h200"), "fp8", &used), 1978.9);
  EXPECT_EQ(status_of([] { an::peak_tflops(an::find_device("h200"), "int3"); }), flashkit::Status::invalid_argument);
}

TEST(Roofline, BoundClassificationAndFloors) {
  an::Roof r{100e9, 10e9};  // ridge 10 FLOP/B
  EXPECT_DOUBLE_EQ(r.ridge(), 10);
  EXPECT_EQ(r.bound(5), an::Bound::memory);
  EXPECT_EQ(r.bound(9.999), an::Bound::memory);
  EXPECT_EQ(r.bound(10), an::Bound::compute);
  EXPECT_EQ(r.bound(1000), an::Bound::compute);
  EXPECT_DOUBLE_EQ(r.attainable(5), 50e9);
  EXPECT_DOUBLE_EQ(r.attainable(50), 100e9);
  EXPECT_DOUBLE_EQ(r.floor_max(1e9, 1e9), 0.1);             // memory: 1 GB / 10 GB/s
  EXPECT_DOUBLE_EQ(r.floor_sum(1e9, 1e9), 0.01 + 0.1);
  // H200 bf16: 989.4 TF / 4.8 TB/s
  EXPECT_NEAR(an::roof_of(an::find_device("h200"), "bf16").ridge(), 989.4e12 / 4.8e12, 1e-9);
}

TEST(Roofline, GemmRidgeN) {
  an::Roof r{100e9, 10e9};
  EXPECT_DOUBLE_EQ(an::square_gemm_ridge_n(r, 4), 60);  // 2N^3 / (12 N^2) = N/6 = 10
  const an::MatmulCost c = an::matmul_cost(60, 60, 60, 4);
  EXPECT_NEAR(c.intensity, 10, 1e-12);
  EXPECT_DOUBLE_EQ(c.macs, 216000);
  EXPECT_DOUBLE_EQ(c.min_bytes, 4.0 * 3 * 3600);
  // GEMV is memory-bound everywhere: about 0.5 FLOP/B in f32.
  EXPECT_NEAR(an::matmul_cost(4096, 1, 4096, 4).intensity, 2.0 * 4096 * 4096 / (4.0 * (4096.0 * 4096 + 2 * 4096)), 1e-12);
}

TEST(Roofline, CpuMeasurementIsBoundedAndPositive) {
  EXPECT_GT(an::measure_cpu_fma_gflops(0.05, 1), 0.1);
  EXPECT_GT(an::measure_triad_gbs(0.05, 1, 4), 0.1);
  const an::DeviceSpec cpu = an::find_device("cpu");  // pinned by the test environment
  EXPECT_GT(cpu.fp32_tflops, 0);
  EXPECT_GT(cpu.mem_bw_gbs, 0);
}

TEST(Roofline, GpuMeasurementSkipsWithoutDevice) {
  const an::GpuMeasurement g = an::measure_gpu(0.1);
  if (!g.available) EXPECT_FALSE(g.error.empty());
}

class GemmVsBlas : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(GemmVsBlas, RelativeError) {
  const auto [M, N, K] = GetParam();
  std::mt19937 rng(M * 131 + N * 7 + K);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> A(size_t(M) * K), B(size_t(K) * N), ref(size_t(M) * N), C(size_t(M) * N);
  for (auto& x : A) x = u(rng);
  for (auto& x : B) x = u(rng);
  an::gemm(an::GemmImpl::blas, M, N, K, A.data(), B.data(), ref.data());
  for (auto impl : {an::GemmImpl::naive, an::GemmImpl::blocked}) {
    std::fill(C.begin(), C.end(), 123.0f);  // must be overwritten
    an::gemm(impl, M, N, K, A.data(), B.data(), C.data());
    double num = 0, den = 0;
    for (size_t i = 0; i < C.size(); ++i) num += double(C[i] - ref[i]) * (C[i] - ref[i]), den += double(ref[i]) * ref[i];
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-5) << an::gemm_impl_name(impl) << " " << M << "x" << N << "x" << K;
  }
  if (N == 1 || M > 0) {  // GEMV on A and the first column of B
    std::vector<float> x(static_cast<size_t>(K)), y(static_cast<size_t>(M)), yr(static_cast<size_t>(M));
    for (int k = 0; k < K; ++k) x[size_t(k)] = B[size_t(k) * N];
    an::gemv(an::GemmImpl::blas, M, K, A.data(), x.data(), yr.data());
    for (auto impl : {an::GemmImpl::naive, an::GemmImpl::blocked}) {
      an::gemv(impl, M, K, A.data(), x.data(), y.data());
      double num = 0, den = 0;
      for (int i = 0; i < M; ++i) num += double(y[i] - yr[i]) * (y[i] - yr[i]), den += double(yr[i]) * yr[i];
      EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-5) << "gemv " << an::gemm_impl_name(impl);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OddSizes, GemmVsBlas,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(7, 13, 5),
                                           std::make_tuple(37, 61, 300), std::make_tuple(130, 17, 513),
                                           std::make_tuple(6, 16, 256), std::make_tuple(100, 1, 77),
                                           std::make_tuple(73, 3100, 9), std::make_tuple(201, 203, 259)));

TEST(Gemm, TimedResultIsConsistent) {
  an::Roof r{100e9, 20e9};
  const an::MatmulResult m = an::time_matmul(an::GemmImpl::blocked, 64, 64, 64, r, 0.01, 3);
  EXPECT_EQ(m.op, "gemm");
  EXPECT_GT(m.seconds, 0);
  EXPECT_NEAR(m.gflops, m.cost.flops / m.seconds / 1e9, 1e-9 * m.gflops);
  EXPECT_EQ(m.bound, "compute");  // AI = 2*64^3 / (12*64^2) = 10.7 > 5
  EXPECT_EQ(an::time_matmul(an::GemmImpl::blas, 64, 1, 64, r, 0.01, 3).bound, "memory");
  EXPECT_EQ(status_of([&] { an::time_matmul(an::GemmImpl::naive, -1, 4, 4, r); }), flashkit::Status::invalid_argument);
  EXPECT_EQ(status_of([] { an::parse_gemm_impl("cublas2"); }), flashkit::Status::invalid_argument);
}

// ---------------------------------------------------------------- model cost
TEST(ModelCost, Gemma3_270mParams) {
  const an::ModelConfig c = an::load_model_config(cfg("gemma-3-270m.json"));
  EXPECT_EQ(c.layers, 18);
  EXPECT_EQ(c.global_layers(), 3);
  EXPECT_EQ(c.sliding_layers(), 15);
  EXPECT_TRUE(c.layer_is_global[5] && c.layer_is_global[11] && c.layer_is_global[17] && !c.layer_is_global[0]);
  EXPECT_TRUE(c.qk_norm && c.sandwich_norm && c.tied_embeddings);
  const an::ParamCount p = an::count_params(c);
  // embedding 262144 * 640; per layer: q 640*1024, k,v 640*256 each, o 1024*640, MLP 3*640*2048,
  // norms 4*640 + q/k norms 2*256.
  EXPECT_DOUBLE_EQ(p.embedding, 262144.0 * 640);
  EXPECT_DOUBLE_EQ(p.per_layer, 655360 + 2 * 163840 + 655360 + 3932160 + 2560 + 512);
  EXPECT_DOUBLE_EQ(p.total, 167772160.0 + 18 * 5573632.0 + 640);
  EXPECT_NEAR(p.total / 1e6, 268.1, 0.05);
}

TEST(ModelCost, Gemma3_270mKvCache) {
  const an::ModelConfig c = an::load_model_config(cfg("gemma-3-270m.json"));
  const an::KvCache k = an::kv_cache(c, 2);
  // Per layer and token: K and V, 1 kv head x 256 x 2 bytes = 1024 B.
  EXPECT_DOUBLE_EQ(k.per_token_global, 3 * 1024);
  EXPECT_DOUBLE_EQ(k.per_token_sliding, 15 * 1024);
  EXPECT_DOUBLE_EQ(k.per_token, 18 * 1024);
  EXPECT_DOUBLE_EQ(k.at_context(100), 18 * 1024 * 100);
  EXPECT_DOUBLE_EQ(k.at_context(4096), 3 * 1024 * 4096 + 15 * 1024 * 512);  // sliding layers keep 512 tokens
}

TEST(ModelCost, Llama32_1b) {
  const an::ModelConfig c = an::load_model_config(cfg("llama-3.2-1b.json"));
  EXPECT_EQ(c.global_layers(), 16);
  EXPECT_FALSE(c.qk_norm || c.sandwich_norm);
  const an::ParamCount p = an::count_params(c);
  EXPECT_DOUBLE_EQ(p.per_layer, 2048.0 * 2048 * 2 + 2 * 2048.0 * 512 + 3 * 2048.0 * 8192 + 2 * 2048);
  EXPECT_DOUBLE_EQ(p.total, 128256.0 * 2048 + 16 * p.per_layer + 2048);
  EXPECT_DOUBLE_EQ(an::kv_cache(c, 2).per_token, 16 * 2 * 8 * 64 * 2);
}

TEST(ModelCost, PerOpRows) {
  const an::ModelConfig c = an::load_model_config(cfg("gemma-3-270m.json"));
  an::Workload w;
  w.decode = true;
  w.batch = 4;
  w.context = 1000;
  auto rows = an::layer_ops(c, w, true);
  auto find = [&](const std::vector<an::OpRow>& rs, const std::string& n) {
    for (const auto& r : rs)
      if (r.name.rfind(n, 0) == 0) return r;
    ADD_FAILURE() << "no op " << n;
    return an::OpRow{};
  };
  EXPECT_DOUBLE_EQ(find(rows, "q_proj").macs, 4.0 * 640 * 1024);
  EXPECT_DOUBLE_EQ(find(rows, "q_proj").weight_bytes, 640.0 * 1024 * 2);
  EXPECT_DOUBLE_EQ(find(rows, "attn_scores").macs, 4.0 * 256 * 4 * 1000);  // heads * hd * batch * context
  EXPECT_DOUBLE_EQ(find(rows, "attn_scores").kv_bytes, 4.0 * 1000 * 256 * 2);  // K of each sequence, read once
  EXPECT_DOUBLE_EQ(find(rows, "mlp_down").macs, 4.0 * 2048 * 640);
  auto local = an::layer_ops(c, w, false);
  EXPECT_DOUBLE_EQ(find(local, "attn_scores").macs, 4.0 * 256 * 4 * 512);  // window caps the context
  for (const char* n : {"input_norm", "q_norm", "k_norm", "rope", "attn_weighted_sum", "o_proj", "post_attn_norm",
                        "residual_attn", "pre_mlp_norm", "mlp_gate", "mlp_up", "mlp_act", "post_mlp_norm", "residual_mlp"})
    find(rows, n);
  // Prefill 1024 through a 512 window: pairs = W(W+1)/2 + (L-W) W.
  an::Workload pf;
  pf.prefill = 1024;
  EXPECT_DOUBLE_EQ(find(an::layer_ops(c, pf, false), "attn_scores").macs, 4.0 * 256 * (512.0 * 513 / 2 + 512.0 * 512));
  EXPECT_DOUBLE_EQ(find(an::layer_ops(c, pf, true), "attn_scores").macs, 4.0 * 256 * (1024.0 * 1025 / 2));
  // Decode batch 1 is memory-bound on an H200; long prefill projections compute-bound.
  an::Workload d1;
  d1.decode = true;
  d1.batch = 1;
  auto r1 = an::layer_ops(c, d1, true);
  an::evaluate(r1, an::find_device("h200"), "bf16");
  EXPECT_EQ(find(r1, "mlp_up").bound, "memory");
  an::Workload p4;
  p4.prefill = 4096;
  auto r4 = an::layer_ops(c, p4, true);
  an::evaluate(r4, an::find_device("h200"), "bf16");
  EXPECT_EQ(find(r4, "mlp_up").bound, "compute");
}

TEST(ModelCost, ReportJsonAndMemory) {
  const an::ModelConfig c = an::load_model_config(cfg("gemma-3-270m.json"));
  an::Workload w;
  const json r = an::cost_report(c, w, an::find_device("h200"), 8, "");
  for (const char* k : {"params_total", "params_per_layer", "kv_cache_bytes_per_token", "ops", "totals", "memory"})
    EXPECT_TRUE(r.contains(k)) << k;
  for (const auto& o : r["ops"])
    for (const char* k : {"name", "macs", "flops", "bytes", "intensity", "bound"}) EXPECT_TRUE(o.contains(k)) << k;
  const double psi = r["params_total"].get<double>();
  const auto& tr = r["memory"]["train_bytes_per_gpu"];
  EXPECT_DOUBLE_EQ(tr["ddp"].get<double>(), 16 * psi);
  EXPECT_DOUBLE_EQ(tr["zero1"].get<double>(), 4 * psi + 12 * psi / 8);
  EXPECT_DOUBLE_EQ(tr["zero2"].get<double>(), 2 * psi + 14 * psi / 8);
  EXPECT_DOUBLE_EQ(tr["zero3"].get<double>(), 16 * psi / 8);
  // Data-parallel communication: ring floors on H200's NVLink (450 GB/s per direction) at dp = 8.
  const auto& dpc = r["data_parallel"];
  EXPECT_DOUBLE_EQ(dpc["grad_bytes"].get<double>(), 4 * psi);
  EXPECT_DOUBLE_EQ(dpc["allreduce_s"].get<double>(), 2.0 * 7 / 8 * 4 * psi / 450e9);
  EXPECT_DOUBLE_EQ(dpc["allgather_s"].get<double>(), 7.0 / 8 * 4 * psi / 450e9);
  EXPECT_EQ(an::dp_comm(c, an::find_device("h200"), 1).total_s(), 0.0);
  EXPECT_EQ(an::dp_comm(c, an::find_device("t4"), 8).total_s(), 0.0);  // no NVLink in the table
  EXPECT_TRUE(r["memory"]["fits"].get<bool>());
  // A 1.2B model with a 64 x 128k context KV cache does not fit a T4; tensor parallelism finds a degree.
  const an::ModelConfig l = an::load_model_config(cfg("llama-3.2-1b.json"));
  an::Workload big;
  big.decode = true;
  big.batch = 64;
  big.context = 131072;
  const an::MemoryPlan m = an::memory_plan(l, big, an::find_device("t4"), 8);
  EXPECT_FALSE(m.fits);
  EXPECT_GT(m.tp_degree, 1);
  EXPECT_LE((m.weights + m.kv_cache) / m.tp_degree + m.activations, m.usable);
}

TEST(ModelCost, SweepCrossovers) {
  const an::ModelConfig c = an::load_model_config(cfg("gemma-3-270m.json"));
  an::Workload w;
  const json pre = an::cost_sweep(c, w, an::find_device("h200"), "prefill", 64, 4096);
  EXPECT_EQ(pre["points"].size(), 7u);
  EXPECT_EQ(pre["points"][0]["matmul_bound"], "memory");
  EXPECT_EQ(pre["points"][6]["matmul_bound"], "compute");
  EXPECT_GT(pre["crossover_matmul"].get<int64_t>(), 64);
  const json dec = an::cost_sweep(c, w, an::find_device("h200"), "decode", 1, 64);
  for (const auto& p : dec["points"]) EXPECT_EQ(p["bound"], "memory");
  EXPECT_EQ(status_of([&] { an::cost_sweep(c, w, an::find_device("h200"), "train", 1, 2); }),
            flashkit::Status::invalid_argument);
}

TEST(ModelCost, NestedTextConfigAndDirectory) {
  const json j = {{"model_type", "gemma3"},
                  {"text_config", {{"hidden_size", 2560}, {"intermediate_size", 10240}, {"num_hidden_layers", 34},
                                   {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256},
                                   {"vocab_size", 262208}, {"sliding_window", 1024}}}};
  const an::ModelConfig c = an::parse_model_config(j, "gemma-3-4b");
  EXPECT_EQ(c.hidden, 2560);
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.global_layers(), 5);  // layers 6, 12, ..., 30 (pattern 6)
  const auto dir = std::filesystem::temp_directory_path() / "flashkit_an_cfg_dir";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << j.dump();
  EXPECT_EQ(an::load_model_config(dir.string()).layers, 34);
  std::filesystem::remove_all(dir);
}

TEST(ModelCost, BadConfigs) {
  EXPECT_EQ(status_of([] { an::load_model_config("/nonexistent/flashkit/model"); }), flashkit::Status::invalid_argument);
  EXPECT_EQ(status_of([] { an::load_model_config(""); }), flashkit::Status::invalid_argument);
  EXPECT_EQ(status_of([] { an::parse_model_config(json{{"hidden_size", 64}}, "x"); }), flashkit::Status::invalid_argument);
  EXPECT_EQ(status_of([] {
              an::parse_model_config(json{{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
                                          {"num_attention_heads", 3}, {"num_key_value_heads", 2}, {"vocab_size", 10}},
                                     "x");
            }),
            flashkit::Status::invalid_argument);
  try {
    an::load_model_config("/nonexistent/flashkit/model");
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not found"), std::string::npos);
  }
}

// ---------------------------------------------------------------- attention IO
TEST(AttentionIo, TeachingFormulas) {
  EXPECT_DOUBLE_EQ(an::teaching_standard_floats(1024, 64), 1024.0 * (4 * 64 + 4 * 1024));
  EXPECT_DOUBLE_EQ(an::teaching_flash_floats(1024, 64), 1024.0 * (5 * 64 + 4));
  // T4, f32: 8.1 TFLOP/s, 320 GB/s; N = 1024, d = 64: FLOPs 4 N^2 d.
  const double flops = 4.0 * 1024 * 1024 * 64;
  const double ts = an::teaching_time(flops, an::teaching_standard_floats(1024, 64), 4, 8.1e12, 320e9);
  const double tf = an::teaching_time(flops, an::teaching_flash_floats(1024, 64), 4, 8.1e12, 320e9);
  EXPECT_NEAR(ts, flops / 8.1e12 + 4 * 4456448.0 / 320e9, 1e-15);
  EXPECT_NEAR(ts * 1e6, 33.14 + 55.71, 0.05);  // 33.1 us compute + 55.7 us memory
  EXPECT_NEAR(tf * 1e6, 33.14 + 4.15, 0.05);
  EXPECT_GT(ts / tf, 2.3);
}

TEST(AttentionIo, DaoModel) {
  // With M big enough for one KV block (Bc >= N) flash forward is exactly the teaching count N(5d + 4).
  const an::AttnIo big = an::attention_io(1024, 64, 1e9);
  EXPECT_DOUBLE_EQ(big.flash_fwd, an::teaching_flash_floats(1024, 64));
  EXPECT_DOUBLE_EQ(big.std_fwd, an::teaching_standard_floats(1024, 64));
  // M = 100k elements, d = 64: Bc = ceil(100000/256) = 391; Tc = ceil(4096/391) = 11.
  const an::AttnIo io = an::attention_io(4096, 64, 100000);
  EXPECT_EQ(io.block_c, 391);
  EXPECT_EQ(io.block_r, 64);
  EXPECT_DOUBLE_EQ(io.flash_fwd, 2.0 * 4096 * 64 + 11 * (3.0 * 4096 * 64 + 4 * 4096));
  EXPECT_DOUBLE_EQ(io.std_bwd, 8.0 * 4096 * 64 + 7.0 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(io.flash_bwd, 4.0 * 4096 * 64 + 11 * (5.0 * 4096 * 64 + 2 * 4096));
  EXPECT_LT(io.flash_fwd, io.std_fwd);
  // Flash traffic falls as M grows (Theta(N^2 d^2 / M)).
  EXPECT_LT(an::attention_io(4096, 64, 200000).flash_fwd, io.flash_fwd);
  const json r = an::attention_io_report(4096, 64, 2, "bf16");
  EXPECT_EQ(r["devices"].size(), an::device_table().size());
  for (const auto& d : r["devices"]) EXPECT_GT(d["fwd_speedup"].get<double>(), 1.0) << d["device"];
  EXPECT_EQ(status_of([] { an::attention_io(0, 64, 100); }), flashkit::Status::invalid_argument);
}

// ---------------------------------------------------------------- profiler and demos
TEST(Profiler, ChromeTraceHasEventsWithArgs) {
  an::Profiler p(an::Roof{100e9, 10e9});
  { an::ScopedRange r(p, "op.a", 1e6, 1e6); }
  { an::ScopedRange r(p, "op.b", 0, 4e6); }
  const json t = p.chrome_trace();
  ASSERT_EQ(t["traceEvents"].size(), 3u);  // metadata + 2
  const auto& e = t["traceEvents"][1];
  EXPECT_EQ(e["ph"], "X");
  EXPECT_EQ(e["name"], "op.a");
  EXPECT_DOUBLE_EQ(e["args"]["flops"].get<double>(), 1e6);
  EXPECT_EQ(e["args"]["bound"], "memory");
  const json s = p.summary_json();
  EXPECT_EQ(s["ops"].size(), 2u);
  EXPECT_NE(p.summary_table().find("op.b"), std::string::npos);
}

TEST(Demos, GeluSeparateMatchesFused) {
  for (float x : {-20.f, -3.f, -0.5f, 0.f, 1e-3f, 0.7f, 2.f, 9.f})
    EXPECT_NEAR(an::gelu_fast_tanh(x), std::tanh(x), 2e-6) << x;
  const int64_t n = 1003;
  std::vector<float> x(n), y1(n), y2(n), a(n), b(n);
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(i - 500) / 60.f;
  an::gelu_separate(x.data(), y1.data(), a.data(), b.data(), n);
  an::gelu_fused(x.data(), y2.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[size_t(i)], ref = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y1[size_t(i)], ref, 1e-5);
    EXPECT_NEAR(y2[size_t(i)], ref, 1e-5);
  }
  an::Profiler p(an::Roof{100e9, 10e9});
  const json r = an::profile_gelu(p, 4096, 1);
  EXPECT_EQ(r["separate"]["kernels"], 8);
  EXPECT_DOUBLE_EQ(r["separate"]["bytes"].get<double>() / r["fused"]["bytes"].get<double>(), 9.0);
  EXPECT_EQ(p.summary_json()["ops"].size(), 10u);  // 8 kernels + 2 totals
}

TEST(Demos, AttentionProfileUsesOpCost) {
  an::Profiler p(an::Roof{100e9, 10e9});
  an::AttentionProfileArgs a;
  a.heads = 2, a.kv_heads = 1, a.seqlen = 64, a.head_dim = 32, a.reps = 1, a.backward = true;
  const json r = an::profile_attention(p, a);
  ASSERT_EQ(r["rows"].size(), 4u);
  for (const auto& row : r["rows"]) {
    EXPECT_GT(row["flops"].get<double>(), 0);
    EXPECT_GT(row["bytes"].get<double>(), 0);
  }
  // Standard attention moves more bytes than flash (the N^2 score matrices).
  EXPECT_GT(r["rows"][0]["bytes"].get<double>(), r["rows"][2]["bytes"].get<double>());
  a.impls = {"fast"};
  EXPECT_EQ(status_of([&] { an::profile_attention(p, a); }), flashkit::Status::invalid_argument);
}

TEST(Hardware, MatchCudaDeviceNames) {
  an::DeviceSpec d;
  ASSERT_TRUE(an::match_device("NVIDIA H200", &d));
  EXPECT_EQ(d.name, "h200");
  ASSERT_TRUE(an::match_device("NVIDIA A100-SXM4-80GB", &d));
  EXPECT_EQ(d.name, "a100-80gb");
  ASSERT_TRUE(an::match_device("NVIDIA H100 PCIe", &d));
  EXPECT_EQ(d.name, "h100-pcie");
  ASSERT_TRUE(an::match_device("NVIDIA H100 80GB HBM3", &d));
  EXPECT_EQ(d.name, "h100-sxm");
  ASSERT_TRUE(an::match_device("Tesla T4", &d));
  EXPECT_EQ(d.name, "t4");
  ASSERT_TRUE(an::match_device("NVIDIA A10", &d));
  EXPECT_EQ(d.name, "a10");
  ASSERT_TRUE(an::match_device("NVIDIA L4", &d));
  EXPECT_EQ(d.name, "l4");
  EXPECT_FALSE(an::match_device("NVIDIA L40S", &d));
  EXPECT_FALSE(an::match_device("NVIDIA GeForce RTX 4090", &d));
}

TEST(Roofline, CublasSkipsWithoutDevice) {
  std::string err;
  if (an::gpu_name().empty()) {
    EXPECT_LT(an::cublas_matmul_seconds(8, 8, 8, true, 1, &err), 0);
    EXPECT_FALSE(err.empty());
  }
}

// ---- GPU fusion demos: the CPU-side plans, and the no-GPU path.
TEST(GpuDemos, GeluBytesAndKernels) {
  const auto ks = an::gelu_separate_kernels();
  ASSERT_EQ(ks.size(), 8u);
  int reads = 0, writes = 0;
  for (const auto& k : ks) reads += k.reads, writes += k.writes;
  EXPECT_EQ(reads, 10);
  EXPECT_EQ(writes, 8);
  EXPECT_DOUBLE_EQ(an::gelu_bytes_per_elem(false, 4), 72);  // as the CPU demo counts
  EXPECT_DOUBLE_EQ(an::gelu_bytes_per_elem(true, 4), 8);
  EXPECT_DOUBLE_EQ(an::gelu_bytes_per_elem(false, 2), 36);
  EXPECT_DOUBLE_EQ(an::gelu_bytes_per_elem(true, 2), 4);
}

TEST(GpuDemos, DecodePlanGemma270m) {
  const an::DecodeShape s;  // gemma-3-270m, context 1024
  EXPECT_TRUE(s.global(5));
  EXPECT_FALSE(s.global(0));
  EXPECT_EQ(s.keys(5), 1024);
  EXPECT_EQ(s.keys(0), 512);
  EXPECT_EQ(an::decode_layer_launches(s, 0).size(), 17u);
  const json p = an::decode_step_plan(s);
  EXPECT_EQ(p["launches"].get<int64_t>(), 18 * 17 + 1);
  EXPECT_EQ(p["cublas_calls"].get<int64_t>(), 18 * 7);
  EXPECT_EQ(p["global_layers"].get<int64_t>(), 3);
  // bf16 projection weights: (q 640x1024 + k,v 640x256 + o 1024x640 + gate, up, down 640x2048) x 2 B x 18 layers
  EXPECT_DOUBLE_EQ(p["weight_bytes"].get<double>(), 18.0 * 2 * (640 * 1024 + 2 * 640 * 256 + 1024 * 640 + 3 * 640 * 2048));
  // K and V (bf16, 1 kv head x 256): 3 global layers x 1024 keys + 15 sliding x 512
  EXPECT_DOUBLE_EQ(p["kv_cache_bytes_read"].get<double>(), (3 * 1024 + 15 * 512) * 2.0 * 256 * 2);
  EXPECT_GT(p["bytes"].get<double>(), p["weight_bytes"].get<double>() + p["kv_cache_bytes_read"].get<double>());
}

TEST(GpuDemos, DecodeShapeFromConfig) {
  const an::DecodeShape g = an::decode_shape_from_config(an::load_model_config(cfg("gemma-3-270m.json")), 2048);
  const an::DecodeShape d;
  EXPECT_EQ(g.hidden, d.hidden);
  EXPECT_EQ(g.intermediate, d.intermediate);
  EXPECT_EQ(g.layers, d.layers);
  EXPECT_EQ(g.heads, d.heads);
  EXPECT_EQ(g.kv_heads, d.kv_heads);
  EXPECT_EQ(g.head_dim, d.head_dim);
  EXPECT_EQ(g.context, 2048);
  EXPECT_EQ(an::decode_step_plan(g)["launches"], an::decode_step_plan(an::DecodeShape{})["launches"]);
  const an::DecodeShape l = an::decode_shape_from_config(an::load_model_config(cfg("llama-3.2-1b.json")), 1024);
  EXPECT_EQ(an::decode_layer_launches(l, 0).size(), 15u);  // no sandwich norms
  EXPECT_EQ(l.keys(3), 1024);                                // no sliding window
}

TEST(GpuDemos, DecodeShapeErrors) {
  an::DecodeShape s;
  s.head_dim = 100;
  EXPECT_EQ(status_of([&] { an::validate_decode_shape(s); }), flashkit::Status::invalid_argument);
  s = an::DecodeShape{};
  s.kv_heads = 3;
  EXPECT_EQ(status_of([&] { an::decode_step_plan(s); }), flashkit::Status::invalid_argument);
  s = an::DecodeShape{};
  s.context = 0;
  EXPECT_EQ(status_of([&] { an::validate_decode_shape(s); }), flashkit::Status::invalid_argument);
  s.context = 200000;
  EXPECT_EQ(status_of([&] { an::validate_decode_shape(s); }), flashkit::Status::invalid_argument);
}

TEST(GpuDemos, NoGpuGivesAReason) {
  if (!an::gpu_name().empty()) GTEST_SKIP() << "a GPU is present";
  const an::GpuDemoResult g = an::gpu_gelu_demo(1024, "bf16", 1, 0);
  EXPECT_FALSE(g.available);
  EXPECT_FALSE(g.error.empty());
  const an::GpuDemoResult d = an::gpu_decode_demo(an::DecodeShape{}, 1, 0);
  EXPECT_FALSE(d.available);
  EXPECT_FALSE(d.error.empty());
}

// A Mamba config is valid for the engine but has no attention/MLP layers: the cost model refuses it instead of
// costing an attention decoder with zero heads (regression: it printed such a table).
TEST(ModelCost, MambaConfigIsRefused) {
  const json j = {{"model_type", "mamba"}, {"vocab_size", 96}, {"hidden_size", 64}, {"num_hidden_layers", 2},
                  {"state_size", 8}};
  try {
    flashkit::analysis::parse_model_config(j, "tiny-mamba");
    ADD_FAILURE() << "no error";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("model_type mamba: the cost model covers attention decoders only"),
              std::string::npos)
        << e.what();
  }
}
