// flashkit bench ssm: Mamba-1's two sequence mixers on the CPU -- the selective scan and the causal depthwise conv1d
// with SiLU -- at every instruction-set level this CPU has (FLASHKIT_CPU_ISA's levels, run side by side in one
// process), and the f64 reference with --reference. Median and minimum time, the work (state updates / conv taps) per
// second, and the op's compulsory bytes per second (OpCost). CUDA's scan has its own bench (bench/ssm, GPU builds).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_checks.hpp"
#include "commands.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/ssm.hpp"
#include "flashkit/tuning.hpp"

namespace flashkit::cli {
namespace {

struct SsmBenchArgs {
  int64_t batch = 1, seqlen = 2048, d_inner = 1536, d_state = 16, width = 4;
  int repeats = 10, warmup = 2, threads = 0;
  bool reference = false;
  std::string json_path;
};

TensorView view(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::f32, shape);
}

struct Timing {
  double median_ms = 0, min_ms = 0;
};

template <typename F>
Timing time_runs(const F& run, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

void run_bench_ssm(const SsmBenchArgs& a) {
  const int64_t B = a.batch, L = a.seqlen, Di = a.d_inner, N = a.d_state, W = a.width;
  const double floats = double(B) * L * Di * 4 + double(B) * L * N * 2 + double(Di) * N;  // u, delta, z, y; B, C; A
  if (floats * 4 > double(max_workspace_bytes()))
    fail(Status::out_of_memory, "--batch/--seqlen/--d-inner/--d-state: the inputs need " +
                                    std::to_string(int64_t(floats * 4 / (1 << 20))) + " MiB, more than the limit of " +
                                    std::to_string(max_workspace_bytes() >> 20) + " MiB");
  std::ofstream json_file;
  if (!a.json_path.empty() && a.json_path != "-") {
    json_file.open(a.json_path);
    if (!json_file) throw CLI::ValidationError("--json", "cannot open '" + a.json_path + "' for writing");
  }
  std::ostream& out = a.json_path == "-" ? std::cerr : std::cout;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> sym(-1.f, 1.f);
  auto filled = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = sym(rng);
    return v;
  };
  std::vector<float> u = filled(B * L * Di), delta = filled(B * L * Di), z = filled(B * L * Di);
  std::vector<float> Bm = filled(B * L * N), Cm = filled(B * L * N), D = filled(Di), bias = filled(Di);
  std::vector<float> A = filled(Di * N), y(B * L * Di), w = filled(Di * W), conv_out(B * L * Di);
  for (auto& x : A) x = -std::exp(1.5f * x);  // -exp(A_log), as Mamba stores it
  SelectiveScanArgs s;
  s.u = view(u, {B, L, Di}), s.delta = view(delta, {B, L, Di}), s.z = view(z, {B, L, Di});
  s.A = view(A, {Di, N}), s.B = view(Bm, {B, L, N}), s.C = view(Cm, {B, L, N});
  s.D = view(D, {Di}), s.delta_bias = view(bias, {Di}), s.y = view(y, {B, L, Di});
  s.threads = a.threads;
  CausalConv1dArgs c;
  c.x = view(u, {B, L, Di}), c.weight = view(w, {Di, W}), c.bias = view(bias, {Di}), c.out = view(conv_out, {B, L, Di});
  c.threads = a.threads;

  // The levels this CPU runs (a cap above what it has runs its widest: listed once).
  std::vector<std::pair<std::string, CpuIsaCap>> levels;
  std::set<std::string> seen;
  for (CpuIsaCap cap : {CpuIsaCap::scalar, CpuIsaCap::avx2, CpuIsaCap::avx512})
    if (seen.insert(cpu_isa(cap)).second) levels.push_back({cpu_isa(cap), cap});
  const Tuning saved = default_tuning();
  nlohmann::json rows = nlohmann::json::array();
  out << "# " << build_info() << "\n# scan: batch " << B << ", seqlen " << L << ", d_inner " << Di << ", d_state " << N
      << "; conv1d width " << W << " + SiLU; threads " << (a.threads ? a.threads : num_threads()) << ", median of "
      << a.repeats << " after " << a.warmup << " warm-up runs\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-7s %-10s %11s %11s %14s %10s %9s\n", "op", "impl", "median ms", "min ms",
                "G work/s", "GB/s", "vs first");
  out << line;
  auto bench_op = [&](const std::string& op, double work) {
    double first = 0;
    auto one = [&](const std::string& impl, SsmImpl which) {
      OpCost cost;
      auto run = [&] {
        if (op == "scan") {
          SelectiveScanArgs k = s;
          k.impl = which;
          selective_scan_forward(k, &cost);
        } else {
          CausalConv1dArgs k = c;
          k.impl = which;
          causal_conv1d_forward(k);
        }
      };
      const bool ref = which == SsmImpl::reference;
      const Timing t = time_runs(run, ref ? 0 : a.warmup, ref ? 1 : a.repeats);
      const double bytes = op == "scan" ? cost.bytes_read + cost.bytes_written : 4.0 * (2.0 * B * L * Di + Di * (W + 1));
      if (first == 0) first = t.median_ms;
      std::snprintf(line, sizeof line, "%-7s %-10s %11.3f %11.3f %14.3f %10.2f %8.2fx\n", op.c_str(), impl.c_str(),
                    t.median_ms, t.min_ms, work / t.median_ms * 1e-6, bytes / t.median_ms * 1e-6,
                    first / t.median_ms);
      out << line << std::flush;
      rows.push_back({{"op", op}, {"impl", impl}, {"median_ms", t.median_ms}, {"min_ms", t.min_ms},
                      {"gwork_per_s", work / t.median_ms * 1e-6}, {"gb_per_s", bytes / t.median_ms * 1e-6}});
    };
    if (a.reference) one("ref.f64", SsmImpl::reference);
    for (const auto& [name, cap] : levels) {
      Tuning t = saved;
      t.cpu_isa = cap;
      set_default_tuning(t);
      one("cpu." + name, SsmImpl::cpu);
    }
    set_default_tuning(saved);
  };
  bench_op("scan", double(B) * L * Di * N);
  bench_op("conv1d", double(B) * L * Di * W);
  const nlohmann::json doc = {{"build", build_info()},
                              {"shape", {{"batch", B}, {"seqlen", L}, {"d_inner", Di}, {"d_state", N}, {"width", W}}},
                              {"threads", a.threads ? a.threads : num_threads()},
                              {"rows", rows}};
  if (a.json_path == "-") std::cout << doc.dump(1) << "\n";
  else if (json_file.is_open()) json_file << doc.dump(1) << "\n";
}

}  // namespace

void add_bench_ssm_command(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto a = std::make_shared<SsmBenchArgs>();
  auto* c = bench->add_subcommand("ssm",
                                  "Time the CPU selective scan and causal conv1d (Mamba) at every instruction-set "
                                  "level of this CPU, and the f64 reference (--reference)");
  c->add_option("--batch", a->batch, "Sequences")->check(int_range(1, 4096))->capture_default_str();
  c->add_option("--seqlen", a->seqlen, "Tokens per sequence")->check(int_range(1, 1 << 20))->capture_default_str();
  c->add_option("--d-inner", a->d_inner, "Channels (Mamba's d_inner)")->check(int_range(1, 1 << 16))->capture_default_str();
  c->add_option("--d-state", a->d_state, "State size per channel")->check(int_range(1, 256))->capture_default_str();
  c->add_option("--width", a->width, "Conv1d width")->check(int_range(1, 16))->capture_default_str();
  c->add_option("--repeats", a->repeats, "Timed runs per row")->check(int_range(1, 100000))->capture_default_str();
  c->add_option("--warmup", a->warmup, "Untimed runs per row")->check(int_range(0, 1000))->capture_default_str();
  c->add_option("-t,--threads", a->threads, "CPU threads (default: the library's)")->check(thread_count(false));
  c->add_flag("--reference", a->reference, "Also time the f64 reference (one run; slow)");
  add_json_option(c, &a->json_path, "the results");
  c->callback([a] { run_bench_ssm(*a); });
}

}  // namespace flashkit::cli
