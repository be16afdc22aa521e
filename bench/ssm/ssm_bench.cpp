// The CUDA selective scan against its floors: forward bytes/s (the op's compulsory bytes, OpCost) as a fraction of
// the H200's measured copy ceiling, flashkit's flash attention forward (causal, bf16) at matched width
// (heads * head_dim = d_inner), and the decode step at batch 1 and 8. One JSON object per line on stdout. The scan
// row also times every kernel generation on the same inputs ("generations": choose_scan_kernel's 0 = production, the
// lean v4 pipelined; 1 = v1 (also v1_ms); 2, 3 = v3 with one state per thread, chunks of 16 / 32; 4 = v2; 5, 6 = v4
// (cp.async ring) with two / four states per thread; 7 = v3 with two states; 8 = v4 with one exp of four on the FMA
// pipe; 11 = lean v4; 13 = lean v4 pipelined by its own number; against the same compulsory bytes) and the backward
// (bwd_ms: production; bwd1_ms: plan_scan_backward's generation 1; against its compulsory bytes: u, delta, z, dout in,
// du, ddelta, dz out, B, C in, dB, dC out).
//   flashkit_ssm_bench [max_seqlen [MAMBA_DIR]]   (default 16384; batch 8, d_inner 1536, d_state 16 as issue 18 asks)
// With MAMBA_DIR (a Mamba checkpoint), also the engine's decode ms/token after contexts of 1k..32k tokens.
//   flashkit_ssm_bench decode MAMBA_DIR   one row: the CUDA engine's greedy decode at batch 1 (generate(): device
//   argmax, graph replay) against the weight-streaming roofline, the weights as the backend stores them
//   (ModelInfo::device_weight_bytes) read once per token at the copy ceiling; issue 18 asks for <= 1.5x.
#include <cuda_runtime.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <chrono>

#include "flashkit/attention.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/ssm.hpp"
#include "flashkit/tuning.hpp"
#include "kernels/cuda/ssm/ssm_cuda.hpp"
#include "kernels/ssm_choice.hpp"

using namespace flashkit;

namespace {

constexpr double kCopyCeiling = 4.24e12;  // bytes/s, the H200 copy ceiling of docs/worklog/attention-cuda.md

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

float* dev_random(size_t n, float lo, float hi, unsigned seed) {
  std::vector<float> h(n);
  srand(seed);
  for (auto& x : h) x = lo + (hi - lo) * float(rand()) / float(RAND_MAX);
  float* p = nullptr;
  ck(cudaMalloc(&p, n * 4), "cudaMalloc");
  ck(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice), "upload");
  return p;
}

// Median-free simple timing: warm up once, then the mean of `reps` runs between two events.
template <class F>
double time_ms(F&& f, int reps) {
  f();
  ck(cudaDeviceSynchronize(), "warmup");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) f();
  cudaEventRecord(b);
  ck(cudaEventSynchronize(b), "timing");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return double(ms) / reps;
}

TensorView cv(void* p, DType dt, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(p, dt, shape, Device::cuda);
}

// Greedy decode of a Mamba model on CUDA against the time to stream its weights once per token. The recurrent and
// conv states (2 x 24 x 1536 x (16 + 4) x 4 B = 5.9 MB per token for mamba-130m, 2% of its bf16 weights) are left
// out of the roofline, so the ratio is slightly pessimistic.
int decode_roofline(const char* dir) {
  LoadOptions lo;
  lo.device = "cuda";
  lo.max_context = 4096;
  std::shared_ptr<Model> m = Model::load(dir, lo);
  const ModelInfo& info = m->info();
  std::vector<int32_t> prompt(16);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 11) % size_t(info.vocab_size));
  GenerateOptions go;
  go.max_new_tokens = 257;
  go.stop_at_eos = false;
  double best_s = 1e30;
  int64_t steps = 0;
  for (int rep = 0; rep < 3; ++rep) {  // the first captures the decode graph; the best of the others
    auto s = m->new_session();
    const GenerationResult r = generate(*s, prompt, go);
    if (rep > 0 && r.decode_steps > 0) {
      best_s = std::min(best_s, r.decode_s / double(r.decode_steps));
      steps = r.decode_steps;
    }
  }
  const double roof_s = double(info.device_weight_bytes) / kCopyCeiling;
  std::printf("{\"op\": \"mamba_decode_roofline\", \"model\": \"%s\", \"backend\": \"%s\", \"layers\": %lld, "
              "\"hidden\": %lld, \"parameters\": %lld, \"weight_dtype\": \"%s\", \"device_weight_bytes\": %lld, "
              "\"decode_steps\": %lld, \"ms_per_token\": %.4f, \"weight_roofline_ms\": %.4f, "
              "\"of_roofline\": %.3f, \"goal_of_roofline\": 1.5, \"cuda_fuse\": %s, \"gemv_plan\": %d, "
              "\"mamba_channels\": %d}\n",
              dir, info.backend.c_str(), (long long)info.num_layers, (long long)info.hidden_size,
              (long long)info.parameters, info.weight_dtype.c_str(), (long long)info.device_weight_bytes,
              (long long)steps, best_s * 1e3, roof_s * 1e3, best_s / roof_s,
              default_tuning().cuda_fuse ? "true" : "false",  // FLASHKIT_CUDA_FUSE (A/B: engine/mamba_fusion.hpp)
              default_tuning().cuda_gemv_plan,                // FLASHKIT_CUDA_GEMV_PLAN (engine/gemv_plan.hpp)
              default_tuning().cuda_mamba_channels);          // FLASHKIT_CUDA_MAMBA_CHANNELS (0: automatic)
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "decode") return decode_roofline(argv[2]);
  const int64_t max_L = argc > 1 ? std::atoll(argv[1]) : 16384;
  const int64_t Bt = 8, Di = 1536, N = 16, heads = 12, hd = 128;
  for (int64_t L = 1024; L <= max_L; L *= 2) {
    const size_t rows = size_t(Bt * L);
    float *u = dev_random(rows * Di, -1, 1, 1), *dl = dev_random(rows * Di, -1, 1, 2);
    float *z = dev_random(rows * Di, -1, 1, 3);
    float *B = dev_random(rows * N, -1, 1, 4), *C = dev_random(rows * N, -1, 1, 5), *y = nullptr;
    float *A = dev_random(size_t(Di * N), -2, -0.1f, 6), *D = dev_random(size_t(Di), 0, 1, 7);
    ck(cudaMalloc(&y, rows * Di * 4), "y");
    SelectiveScanArgs a;
    a.u = cv(u, DType::f32, {Bt, L, Di});
    a.delta = cv(dl, DType::f32, {Bt, L, Di});
    a.z = cv(z, DType::f32, {Bt, L, Di});
    a.y = cv(y, DType::f32, {Bt, L, Di});
    a.B = cv(B, DType::f32, {Bt, L, N});
    a.C = cv(C, DType::f32, {Bt, L, N});
    a.A = cv(A, DType::f32, {Di, N});
    a.D = cv(D, DType::f32, {Di});
    OpCost cost;
    selective_scan_forward(a, &cost);
    const double ms = time_ms([&] { selective_scan_forward(a); }, 10);
    const double bytes = cost.bytes_read + cost.bytes_written, bw = bytes / (ms * 1e-3);
    kernels::ScanArgs k1;  // the same problem (contiguous, softplus, no bias) for every kernel generation
    k1.batch = Bt, k1.seqlen = L, k1.d_inner = Di, k1.d_state = N;
    k1.u = u, k1.delta = dl, k1.z = z, k1.y = y, k1.B = B, k1.C = C, k1.A = A, k1.D = D;
    k1.u_b = k1.dl_b = k1.z_b = k1.y_b = L * Di;
    k1.u_t = k1.dl_t = k1.z_t = k1.y_t = Di;
    k1.B_b = k1.C_b = L * N;
    k1.B_t = k1.C_t = N;
    // choose_scan_kernel's generations side by side (kernels::kScanGenerations): 0 production (generation 13), 1 v1,
    // 2-3 v3, 4 v2, 5-6 v4, 7 v3 (two states), 8 v4 (FMA exp), 11 v4 lean (v4_npt4 with less per-chunk overhead;
    // tools/gpu/ssm_cuda.sh compares it with 6, timed here in turn), 13 lean with its chunk phases pipelined (compared
    // with 11: the "gen13:" lines). 9, 10 (v5) and 12 are retired (dev/cuda/ssm/).
    std::string gens = "[";
    double v1_ms = 0;
    std::string v1_kernel;
    for (int g : kernels::kScanGenerations) {
      const std::string name = kernels::selective_scan_cuda(k1, nullptr, g);
      const double gms = time_ms([&] { kernels::selective_scan_cuda(k1, nullptr, g); }, 10);
      if (g == 1) v1_ms = gms, v1_kernel = name;
      char row[256];
      std::snprintf(row, sizeof row,
                    "%s{\"generation\": %d, \"kernel\": \"%s\", \"ms\": %.4f, \"of_copy_ceiling\": %.3f}",
                    g ? ", " : "", g, name.c_str(), gms, bytes / (gms * 1e-3) / kCopyCeiling);
      gens += row;
    }
    gens += "]";
    // the backward (no z-less shortcut: D, z present as in the forward above; dout = y's buffer reused as input)
    float *du = nullptr, *ddl = nullptr, *dz = nullptr, *dout = nullptr, *dB = nullptr, *dC = nullptr, *dA = nullptr,
          *dD = nullptr;
    for (float** p : {&du, &ddl, &dz, &dout}) ck(cudaMalloc(p, rows * Di * 4), "grads");
    for (float** p : {&dB, &dC}) ck(cudaMalloc(p, rows * N * 4), "grads");
    ck(cudaMalloc(&dA, size_t(Di * N) * 4), "dA");
    ck(cudaMalloc(&dD, size_t(Di) * 4), "dD");
    ck(cudaMemcpy(dout, u, rows * Di * 4, cudaMemcpyDeviceToDevice), "dout");
    SelectiveScanGrads gr{cv(du, DType::f32, {Bt, L, Di}), cv(ddl, DType::f32, {Bt, L, Di}),
                          cv(dA, DType::f32, {Di, N}),     cv(dB, DType::f32, {Bt, L, N}),
                          cv(dC, DType::f32, {Bt, L, N}),  cv(dD, DType::f32, {Di}),
                          cv(dz, DType::f32, {Bt, L, Di}), TensorView{}};
    const TensorView dv = cv(dout, DType::f32, {Bt, L, Di});
    const double bwd_ms = time_ms([&] { selective_scan_backward(a, dv, gr); }, 3);
    kernels::ScanGradArgs kg;  // generation 1 of the backward (plan_scan_backward) through the kernel entry point
    kg.dout = dout, kg.dout_b = L * Di, kg.dout_t = Di;
    kg.du = du, kg.ddelta = ddl, kg.dA = dA, kg.dB = dB, kg.dC = dC, kg.dD = dD, kg.dz = dz;
    const std::string bwd1_kernel = kernels::selective_scan_backward_cuda(k1, kg, nullptr, 1);
    const double bwd1_ms = time_ms([&] { kernels::selective_scan_backward_cuda(k1, kg, nullptr, 1); }, 3);
    // compulsory: u, delta, z, dout read and du, ddelta, dz written per (row, channel); B, C read and dB, dC written
    // per row
    const double bwd_bytes = 4.0 * double(rows) * (7.0 * double(Di) + 4.0 * double(N));
    for (float* p : {du, ddl, dz, dout, dB, dC, dA, dD}) cudaFree(p);
    for (float* p : {u, dl, z, B, C, y, A, D}) cudaFree(p);
    // flash attention forward at matched width: q, k, v bf16 [Bt, L, 12, 128], causal
    void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *lse = nullptr;
    const size_t qkv = rows * size_t(heads * hd) * 2;
    for (void** p : {&q, &k, &v, &o}) {
      ck(cudaMalloc(p, qkv), "qkv");
      ck(cudaMemset(*p, 0x3c, qkv), "fill");  // bf16 0x3c3c ~ 0.0115: finite, nonzero
    }
    ck(cudaMalloc(&lse, size_t(Bt * heads * L) * 4), "lse");
    AttentionOptions ao;
    ao.causal = true;
    ao.check_finite = false;
    auto at = [&] {
      attention_forward(cv(q, DType::bf16, {Bt, L, heads, hd}), cv(k, DType::bf16, {Bt, L, heads, hd}),
                        cv(v, DType::bf16, {Bt, L, heads, hd}), cv(o, DType::bf16, {Bt, L, heads, hd}),
                        cv(lse, DType::f32, {Bt, heads, L}), ao);
    };
    const double ams = time_ms(at, 5);
    for (void* p : {q, k, v, o, lse}) cudaFree(p);
    std::printf("{\"op\": \"scan_fwd\", \"batch\": %lld, \"seqlen\": %lld, \"d_inner\": %lld, \"d_state\": %lld, "
                "\"kernel\": \"%s\", \"ms\": %.4f, \"bytes\": %.0f, \"bytes_per_s\": %.4g, \"of_copy_ceiling\": %.3f, "
                "\"attention_fwd_ms\": %.4f, \"scan_speedup_vs_attention\": %.2f, \"v1_kernel\": \"%s\", "
                "\"v1_ms\": %.4f, \"v1_of_copy_ceiling\": %.3f, \"generations\": %s, \"bwd_ms\": %.4f, "
                "\"bwd_bytes\": %.0f, \"bwd_of_copy_ceiling\": %.3f, \"bwd1_kernel\": \"%s\", \"bwd1_ms\": %.4f, "
                "\"bwd1_of_copy_ceiling\": %.3f}\n",
                (long long)Bt, (long long)L, (long long)Di, (long long)N, cost.kernel.c_str(), ms, bytes, bw,
                bw / kCopyCeiling, ams, ams / ms, v1_kernel.c_str(), v1_ms, bytes / (v1_ms * 1e-3) / kCopyCeiling,
                gens.c_str(), bwd_ms, bwd_bytes, bwd_bytes / (bwd_ms * 1e-3) / kCopyCeiling, bwd1_kernel.c_str(),
                bwd1_ms, bwd_bytes / (bwd1_ms * 1e-3) / kCopyCeiling);
    std::fflush(stdout);
  }
  // decode step: the whole state read and written once per token
  for (int64_t b : {1, 8}) {
    float *u = dev_random(size_t(b * Di), -1, 1, 1), *dl = dev_random(size_t(b * Di), -1, 1, 2);
    float *z = dev_random(size_t(b * Di), -1, 1, 3), *B = dev_random(size_t(b * N), -1, 1, 4);
    float *C = dev_random(size_t(b * N), -1, 1, 5), *A = dev_random(size_t(Di * N), -2, -0.1f, 6);
    float *D = dev_random(size_t(Di), 0, 1, 7), *st = dev_random(size_t(b * Di * N), -1, 1, 8), *y = nullptr;
    ck(cudaMalloc(&y, size_t(b * Di) * 4), "y");
    SelectiveScanArgs a;
    a.u = cv(u, DType::f32, {b, Di}); a.delta = cv(dl, DType::f32, {b, Di}); a.z = cv(z, DType::f32, {b, Di});
    a.y = cv(y, DType::f32, {b, Di}); a.B = cv(B, DType::f32, {b, N}); a.C = cv(C, DType::f32, {b, N});
    a.A = cv(A, DType::f32, {Di, N}); a.D = cv(D, DType::f32, {Di}); a.state = cv(st, DType::f32, {b, Di, N});
    OpCost cost;
    selective_scan_step(a, &cost);
    const double ms = time_ms([&] { selective_scan_step(a); }, 200);
    std::printf("{\"op\": \"scan_step\", \"batch\": %lld, \"d_inner\": %lld, \"d_state\": %lld, \"kernel\": \"%s\", "
                "\"us\": %.3f, \"bytes\": %.0f}\n",
                (long long)b, (long long)Di, (long long)N, cost.kernel.c_str(), ms * 1e3,
                cost.bytes_read + cost.bytes_written);
    for (float* p : {u, dl, z, B, C, A, D, st, y}) cudaFree(p);
  }
  if (argc > 2) {  // engine decode after growing contexts, one session: the state does not grow with the context
    LoadOptions lo;
    lo.max_context = 32768 + 256;
    for (const char* dev : {"cpu", "cuda"}) {
      lo.device = dev;
      std::shared_ptr<Model> m;
      try {
        m = Model::load(argv[2], lo);
      } catch (const std::exception& e) {
        std::printf("{\"op\": \"mamba_decode\", \"device\": \"%s\", \"skipped\": \"%s\"}\n", dev, e.what());
        continue;
      }
      auto s = m->new_session();
      const int32_t V = int32_t(m->info().vocab_size);
      int64_t have = 0;
      for (int64_t ctx = 1024; ctx <= 32768; ctx *= 2) {
        std::vector<int32_t> ids(size_t(ctx - have));
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + size_t(have)) % size_t(V));
        s->prefill(ids);
        have = ctx;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 32; ++i) s->decode(int32_t(i % V));
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 32;
        // continue from the decoded tokens: the next context starts where this one ended (+32)
        have += 32;
        std::printf("{\"op\": \"mamba_decode\", \"device\": \"%s\", \"context\": %lld, \"ms_per_token\": %.4f}\n",
                    dev, (long long)ctx, ms);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
