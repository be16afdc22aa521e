// flashkit roofline | cost | profile: the cost and roofline analysis of issue 3 (src/analysis).
//   flashkit roofline [--measure]                 datasheet table, ridge points; measure this machine
//   flashkit roofline gemm [--sizes ...] [--gemv] GEMM/GEMV implementations on the roofline
//   flashkit cost -m CONFIG [--device h200] ...   per-op cost of one decoder layer, totals, KV cache, memory
//   flashkit cost attention -N 4096 -d 64         HBM traffic of standard vs flash attention, per device
//   flashkit profile gelu | attention [--trace F] summary sorted by time (+ Chrome/Perfetto trace with --trace)
//   flashkit profile gelu --gpu | decode --gpu    GPU fusion demos: 8 kernels vs 1; decode eager vs CUDA graph
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_io.hpp"
#include "cli_checks.hpp"
#include "progress.hpp"
#include "commands.hpp"
#include "core/limits.hpp"
#include "demos.hpp"
#include "gpu_demos.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "gemm.hpp"
#include "hardware.hpp"
#include "model_cost.hpp"
#include "profiler.hpp"
#include "roofline.hpp"

namespace flashkit::cli {

namespace {
namespace an = flashkit::analysis;
using nlohmann::json;

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

void need_positive(int64_t v, const char* name) {
  if (v <= 0) bad(std::string(name) + " must be a positive integer, got " + std::to_string(v));
}

// 3 significant digits with an SI suffix: 1.23G
std::string si(double x) {
  const char* suf[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  double a = x < 0 ? -x : x;
  while (a >= 1000 && i < 6) a /= 1000, x /= 1000, ++i;
  char b[32];
  std::snprintf(b, sizeof b, a >= 100 ? "%.0f%s" : a >= 10 ? "%.1f%s" : "%.2f%s", x, suf[i]);
  return b;
}
std::string num(double x, const char* f = "%.3g") {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}
std::string seconds_str(double s) {
  if (s >= 1) return num(s, "%.3f s");
  if (s >= 1e-3) return num(s * 1e3, "%.3f ms");
  return num(s * 1e6, "%.2f us");
}

void write_text(const std::string& path, const std::string& text) {
  if (path == "-") {
    write_json_stdout(text);  // past a TextToStderr: stdout holds this document only
    return;
  }
  std::ofstream f(path);
  if (!f) bad("cannot write " + path);
  f << text;
  f.close();
  if (!f) bad("writing " + path + " failed (disk full?)");
}

// A simple aligned text / Markdown table.
struct Table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  std::string text() const {
    std::vector<size_t> w(head.size());
    for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
    for (auto& r : rows)
      for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
    std::ostringstream o;
    auto line = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < w.size(); ++i) {
        std::string c = i < r.size() ? r[i] : "";
        o << (i ? "  " : "") << c << std::string(w[i] - c.size(), ' ');
      }
      o << "\n";
    };
    line(head);
    for (auto& r : rows) line(r);
    return o.str();
  }
  std::string markdown() const {
    std::ostringstream o;
    o << "|";
    for (auto& h : head) o << " " << h << " |";
    o << "\n|";
    for (size_t i = 0; i < head.size(); ++i) o << "---|";
    o << "\n";
    for (auto& r : rows) {
      o << "|";
      for (auto& c : r) o << " " << c << " |";
      o << "\n";
    }
    return o.str();
  }
  std::string csv() const {
    std::ostringstream o;
    for (size_t i = 0; i < head.size(); ++i) o << (i ? "," : "") << head[i];
    o << "\n";
    for (auto& r : rows) {
      for (size_t i = 0; i < r.size(); ++i) o << (i ? "," : "") << r[i];
      o << "\n";
    }
    return o.str();
  }
};

// One GEMM/GEMV measurement as a table row and a JSON row.
void add_matmul_row(Table& t, json& rows, const an::MatmulResult& r) {
  t.rows.push_back({r.op, r.impl, std::to_string(r.M), std::to_string(r.N), std::to_string(r.K), si(r.cost.macs),
                    si(r.cost.flops), si(r.cost.min_bytes), num(r.cost.intensity, "%.2f"), seconds_str(r.seconds),
                    num(r.gflops, "%.2f"), num(r.gbs, "%.2f"), r.bound, num(r.pct_of_roof, "%.1f"),
                    seconds_str(r.floor_seconds)});
  rows.push_back({{"op", r.op}, {"impl", r.impl}, {"kernel", r.kernel}, {"M", r.M}, {"N", r.N}, {"K", r.K},
                  {"macs", r.cost.macs}, {"flops", r.cost.flops}, {"min_bytes", r.cost.min_bytes},
                  {"intensity", r.cost.intensity}, {"seconds", r.seconds}, {"reps", r.reps}, {"gflops", r.gflops},
                  {"gbs", r.gbs}, {"bound", r.bound}, {"pct_of_roof", r.pct_of_roof}, {"floor_seconds", r.floor_seconds}});
}

std::string tf(double v) { return v > 0 ? num(v, "%.4g") : "-"; }

// ---------------------------------------------------------------- roofline
void add_roofline(CLI::App& app) {
  auto* rl = app.add_subcommand("roofline", "Device table with ridge points; --measure measures this machine");
  rl->require_subcommand(0, 1);
  struct Opts {
    bool measure = false;
    double seconds = 1.0;
    int threads = 0;
    double triad_mb = 64;
    std::string json_out, md_out;
  };
  auto o = std::make_shared<Opts>();
  rl->add_flag("--measure", o->measure, "Measure this machine: CPU f32 FMA peak and triad bandwidth (GPU: copy BW, bf16 GEMM)");
  rl->add_option("--seconds", o->seconds, "Time budget for --measure (default 1 s)")
      ->check(real_range(0, limits::kMaxBenchSeconds, true));
  rl->add_option("-t,--threads", o->threads, "CPU threads (default: flashkit's)")->check(thread_count());
  rl->add_option("--triad-mb", o->triad_mb, "Triad array size, MB each (default 64)")
      ->check(real_range(1, limits::kMaxTriadMb));
  add_json_option(rl, &o->json_out, "the table (and measurements)");
  rl->add_option("--md", o->md_out, "Write the table as Markdown to FILE");

  struct GemmOpts {
    std::vector<std::string> impls = {"naive", "blocked", "blas"};
    std::vector<int64_t> sizes = {256, 512, 1024};
    std::vector<std::string> shapes;
    bool gemv = false, sweep = false, gpu = false, quiet = false;
    int64_t naive_max = 512;
    double seconds = 0.3;
    int threads = 0;
    std::string json_out, csv_out, md_out;
  };
  auto g = std::make_shared<GemmOpts>();
  auto* gs = rl->add_subcommand("gemm", "Time GEMM/GEMV implementations and place them on this CPU's roofline");
  gs->add_option("--impl", g->impls, "naive, blocked, blas (comma-separated)")->delimiter(',');
  gs->add_option("--sizes", g->sizes, "Square sizes N (GEMM N x N x N; GEMV N x N) (default 256,512,1024)")
      ->delimiter(',')
      ->check(int_range(1, limits::kMaxGemmSize));
  gs->add_option("--shapes", g->shapes, "Extra M x N x K shapes, e.g. 512x4096x1024,4096x1x4096 (N = 1: GEMV)")
      ->delimiter(',');
  gs->add_flag("--sweep", g->sweep, "The issue's sweep: N = 1024, 2048, 4096, 8192 (blas/blocked), with GEMV");
  gs->add_flag("--gemv", g->gemv, "Also time GEMV (y = A x) at each size");
  gs->add_option("--naive-max", g->naive_max, "Largest N the naive loop runs at (default 512; 1024 with --sweep)")
      ->check(int_range(0, limits::kMaxGemmSize));
  gs->add_option("--seconds", g->seconds, "Time budget per point (default 0.3 s; at least one run)")
      ->check(real_range(0, limits::kMaxBenchSeconds, true));
  gs->add_option("-t,--threads", g->threads, "CPU threads (0: flashkit's default)")->check(thread_count());
  gs->add_flag("--gpu", g->gpu, "Also time cuBLAS (f32 SGEMM/SGEMV and bf16 GemmEx) on GPU 0, on its datasheet roof");
  add_json_option(gs, &g->json_out, "the results");
  gs->add_option("--csv", g->csv_out, "Write results as CSV to FILE");
  gs->add_option("--md", g->md_out, "Write results as Markdown to FILE");
  gs->add_flag("-q,--quiet", g->quiet, "No progress lines on stderr (printed every few seconds of a long run)");

  rl->callback([o, gs] {
    if (gs->parsed()) return;
    const TextToStderr json_stdout(o->json_out == "-");
    if (o->seconds <= 0) bad("--seconds must be positive");
    Table t{{"device", "f32 TF", "tf32 TF", "bf16 TF", "f16 TF", "fp8 TF", "BW GB/s", "mem GB", "L2 MB", "smem/SM KB", "SMs",
             "ridge f32", "ridge bf16", "GEMM N* bf16"}};
    json devs = json::array();
    auto add = [&](const an::DeviceSpec& d) {
      const an::Roof r32 = an::roof_of(d, "f32"), r16 = an::roof_of(d, "bf16");
      t.rows.push_back({d.name, tf(d.fp32_tflops), tf(d.tf32_tflops), tf(d.bf16_tflops), tf(d.fp16_tflops),
                        tf(d.fp8_tflops), num(d.mem_bw_gbs, "%.0f"), num(d.mem_gb, "%.0f"), num(d.l2_mb, "%.0f"),
                        num(d.smem_per_sm_kb, "%.0f"), std::to_string(d.sms), num(r32.ridge(), "%.1f"),
                        num(r16.ridge(), "%.1f"), num(an::square_gemm_ridge_n(r16, 2), "%.0f")});
      devs.push_back({{"name", d.name}, {"full_name", d.full_name}, {"fp32_tflops", d.fp32_tflops},
                      {"tf32_tflops", d.tf32_tflops}, {"bf16_tflops", d.bf16_tflops}, {"fp16_tflops", d.fp16_tflops},
                      {"fp8_tflops", d.fp8_tflops}, {"mem_bw_gbs", d.mem_bw_gbs}, {"mem_gb", d.mem_gb},
                      {"l2_mb", d.l2_mb}, {"smem_per_sm_kb", d.smem_per_sm_kb}, {"sms", d.sms},
                      {"ridge_f32", r32.ridge()}, {"ridge_bf16", r16.ridge()},
                      {"gemm_compute_bound_n_bf16", an::square_gemm_ridge_n(r16, 2)},
                      {"gemm_compute_bound_n_f32", an::square_gemm_ridge_n(r32, 4)}, {"source", d.source}});
    };
    for (const auto& d : an::device_table()) add(d);
    json out = {{"devices", devs}};
    if (o->measure) {
      check_memory(3 * o->triad_mb * 1e6, "roofline --measure --triad-mb (three arrays of " + num(o->triad_mb, "%g") + " MB)");
      const Activity act("measuring this CPU");
      const an::CpuMeasurement m = an::measure_cpu(o->seconds, o->threads, o->triad_mb);
      an::DeviceSpec c;
      c.name = "cpu(measured)";
      c.full_name = an::cpu_model_name();
      c.fp32_tflops = m.fma_peak_gflops / 1e3;
      c.mem_bw_gbs = m.triad_gbs;
      c.sms = m.threads;
      add(c);
      out["cpu"] = {{"model", an::cpu_model_name()}, {"threads", m.threads}, {"isa", m.isa},
                    {"fma_peak_gflops", m.fma_peak_gflops}, {"triad_gbs", m.triad_gbs},
                    {"triad_array_mb", m.triad_array_mb}, {"ridge_flop_per_byte", m.fma_peak_gflops / m.triad_gbs},
                    {"note", "measured on a possibly shared machine; rerun when idle for a clean ceiling"}};
      const an::GpuMeasurement gm = an::measure_gpu(o->seconds);
      out["gpu"] = {{"available", gm.available}, {"name", gm.name}, {"error", gm.error}, {"copy_gbs", gm.copy_gbs},
                    {"bf16_gemm_tflops", gm.bf16_gemm_tflops}, {"sms", gm.sms}, {"mem_gb", gm.mem_gb}};
    }
    std::cout << t.text();
    std::cout << "ridge = peak / bandwidth (FLOP/byte); GEMM N* = square bf16 GEMM size where 2N^3/(3*2*N^2) "
                 "reaches the bf16 ridge (f16 where a device has no bf16, f32 on a CPU). Figures are dense datasheet values (see --json for sources).\n";
    if (o->measure) {
      const auto& c = out["cpu"];
      std::cout << "\nthis CPU: " << c["model"].get<std::string>() << ", " << c["threads"].get<int>() << " threads, "
                << c["isa"].get<std::string>() << "\n  f32 FMA peak " << num(c["fma_peak_gflops"].get<double>(), "%.1f")
                << " GFLOP/s, triad bandwidth " << num(c["triad_gbs"].get<double>(), "%.1f")
                << " GB/s, ridge " << num(c["ridge_flop_per_byte"].get<double>(), "%.2f")
                << " FLOP/B (measured; noisy if the machine is shared)\n";
      const auto& gj = out["gpu"];
      if (gj["available"].get<bool>())
        std::cout << "GPU " << gj["name"].get<std::string>() << ": copy " << num(gj["copy_gbs"].get<double>(), "%.0f")
                  << " GB/s, bf16 cuBLAS GEMM " << num(gj["bf16_gemm_tflops"].get<double>(), "%.1f") << " TFLOP/s\n";
      else
        std::cout << "GPU: skipped (" << gj["error"].get<std::string>() << ")\n";
    }
    if (!o->json_out.empty()) write_text(o->json_out, out.dump(2) + "\n");
    if (!o->md_out.empty()) write_text(o->md_out, t.markdown());
  });

  gs->callback([g, gs] {
    const TextToStderr json_stdout(g->json_out == "-");
    if (g->sweep) {
      g->sizes = {1024, 2048, 4096, 8192};
      g->gemv = true;
      if (gs->count("--naive-max") == 0) g->naive_max = 1024;
    }
    if (g->sizes.empty()) bad("--sizes: give at least one size");
    for (auto s : g->sizes) {
      need_positive(s, "--sizes");
      check_memory(3.0 * double(s) * double(s) * 4, "roofline gemm --sizes " + std::to_string(s) + " (A, B, C in f32)");
    }
    if (g->seconds <= 0) bad("--seconds must be positive");
    std::vector<an::GemmImpl> impls;
    for (auto& s : g->impls) impls.push_back(an::parse_gemm_impl(s));
    const an::DeviceSpec cpu = an::local_cpu_spec();
    const an::Roof roof = an::roof_of(cpu, "f32");
    std::cerr << "roof: " << num(roof.peak_flops / 1e9, "%.1f") << " GFLOP/s, " << num(roof.bw_bytes / 1e9, "%.1f")
              << " GB/s (measured now), ridge " << num(roof.ridge(), "%.2f") << " FLOP/B\n";
    Table t{{"op", "impl", "M", "N", "K", "MACs", "FLOPs", "min bytes", "AI", "time", "GFLOP/s", "GB/s", "bound",
             "%roof", "floor"}};
    json rows = json::array();
    auto skipped = [&](an::GemmImpl impl, bool is_gemv, int64_t n) {
      return impl == an::GemmImpl::naive && !is_gemv && n > g->naive_max;
    };
    int64_t points = 0, done = 0;
    for (int64_t n : g->sizes)
      for (int pass = 0; pass < (g->gemv ? 2 : 1); ++pass)
        for (auto impl : impls) points += skipped(impl, pass == 1, n) ? 0 : 1;
    Progress progress("roofline gemm", points, g->quiet);
    for (int64_t n : g->sizes) {
      for (int pass = 0; pass < (g->gemv ? 2 : 1); ++pass) {
        const bool is_gemv = pass == 1;
        for (auto impl : impls) {
          if (skipped(impl, is_gemv, n)) continue;
          progress.step(done++, std::string(is_gemv ? "gemv " : "gemm ") + an::gemm_impl_name(impl) + " N=" +
                                    std::to_string(n));
          const an::MatmulResult r = an::time_matmul(impl, n, is_gemv ? 1 : n, n, roof, g->seconds, 20, g->threads);
          add_matmul_row(t, rows, r);
        }
      }
    }
    json gpu_rows = json::array();
    if (g->gpu) {
      std::string err;
      const std::string name = an::gpu_name();
      an::DeviceSpec gd;
      if (name.empty()) an::cublas_matmul_seconds(1, 1, 1, false, 1, &err);
      else if (!an::match_device(name, &gd)) err = "GPU '" + name + "' is not in the hardware table";
      if (!err.empty()) {
        std::cerr << "cuBLAS: skipped (" << err << ")\n";
      } else {
        for (int64_t n : g->sizes)
          for (int pass = 0; pass < (g->gemv ? 2 : 1); ++pass)
            for (bool bf16 : {false, true}) {
              const int64_t N = pass == 1 ? 1 : n;
              const double e = bf16 ? 2 : 4;
              const an::Roof roof_g = an::roof_of(gd, bf16 ? "bf16" : "f32");
              const an::MatmulCost c = an::matmul_cost(n, N, n, e);
              std::string why;
              const double sec = an::cublas_matmul_seconds(n, N, n, bf16, 10, &why);
              if (sec <= 0) {
                std::cerr << "cuBLAS " << n << ": " << why << "\n";
                continue;
              }
              const std::string impl = bf16 ? "cublas.bf16" : "cublas.f32";
              const double gf = c.flops / sec / 1e9, gb = c.min_bytes / sec / 1e9;
              const double pct = 100.0 * (c.flops / sec) / roof_g.attainable(c.intensity);
              const double fl = roof_g.floor_max(c.flops, c.min_bytes);
              t.rows.push_back({pass == 1 ? "gemv" : "gemm", impl, std::to_string(n), std::to_string(N), std::to_string(n),
                                si(c.macs), si(c.flops), si(c.min_bytes), num(c.intensity, "%.2f"), seconds_str(sec),
                                num(gf, "%.2f"), num(gb, "%.2f"), an::bound_name(roof_g.bound(c.intensity)),
                                num(pct, "%.1f"), seconds_str(fl)});
              gpu_rows.push_back({{"op", pass == 1 ? "gemv" : "gemm"}, {"impl", impl}, {"device", gd.name},
                                  {"gpu", name}, {"M", n}, {"N", N}, {"K", n}, {"macs", c.macs}, {"flops", c.flops},
                                  {"min_bytes", c.min_bytes}, {"intensity", c.intensity}, {"seconds", sec},
                                  {"gflops", gf}, {"gbs", gb}, {"bound", an::bound_name(roof_g.bound(c.intensity))},
                                  {"pct_of_roof", pct}, {"floor_seconds", fl}});
            }
      }
    }
    for (const auto& sh : g->shapes) {
      int64_t m = 0, n = 0, k = 0;
      char x1 = 0, x2 = 0, extra = 0;
      if (std::sscanf(sh.c_str(), "%ld%c%ld%c%ld%c", &m, &x1, &n, &x2, &k, &extra) != 5 || x1 != 'x' || x2 != 'x')
        bad("--shapes: expected MxNxK (e.g. 512x4096x1024), got '" + sh + "'");
      need_positive(m, "--shapes M");
      need_positive(n, "--shapes N");
      need_positive(k, "--shapes K");
      if (m > limits::kMaxGemmSize || n > limits::kMaxGemmSize || k > limits::kMaxGemmSize)
        bad("--shapes: each of M, N, K must be at most " + std::to_string(limits::kMaxGemmSize) + ", got '" + sh + "'");
      check_memory((double(m) * double(k) + double(k) * double(n) + double(m) * double(n)) * 4,
                   "roofline gemm --shapes " + sh + " (A, B, C in f32)");
      for (auto impl : impls) {
        if (impl == an::GemmImpl::naive && double(m) * double(n) * double(k) > double(g->naive_max) * g->naive_max * g->naive_max)
          continue;
        const an::MatmulResult r = an::time_matmul(impl, m, n, k, roof, g->seconds, 20, g->threads);
        add_matmul_row(t, rows, r);
      }
    }
    std::cout << t.text();
    // Where square GEMM turns compute-bound on each device.
    Table nt{{"device", "ridge f32", "N* f32 (4-byte)", "ridge bf16", "N* bf16 (2-byte)"}};
    json ridge = json::array();
    std::vector<an::DeviceSpec> devs = an::device_table();
    devs.push_back(cpu);
    for (const auto& d : devs) {
      const an::Roof r32 = an::roof_of(d, "f32"), r16 = an::roof_of(d, "bf16");
      nt.rows.push_back({d.name, num(r32.ridge(), "%.1f"), num(an::square_gemm_ridge_n(r32, 4), "%.0f"),
                         num(r16.ridge(), "%.1f"), num(an::square_gemm_ridge_n(r16, 2), "%.0f")});
      ridge.push_back({{"device", d.name}, {"ridge_f32", r32.ridge()}, {"n_star_f32", an::square_gemm_ridge_n(r32, 4)},
                       {"ridge_bf16", r16.ridge()}, {"n_star_bf16", an::square_gemm_ridge_n(r16, 2)}});
    }
    std::cout << "\nsquare GEMM turns compute-bound at N >= N* = 1.5 * elem_bytes * ridge (minimum traffic):\n"
              << nt.text();
    json out = {{"cpu", {{"name", cpu.full_name}, {"peak_gflops", roof.peak_flops / 1e9}, {"bw_gbs", roof.bw_bytes / 1e9},
                         {"ridge", roof.ridge()}, {"threads", num_threads()}}},
                {"results", rows}, {"gpu_results", gpu_rows}, {"compute_bound_n", ridge},
                {"note", "f32; min bytes = 4(MK + KN + MN); times are best-of-reps on a possibly shared machine"}};
    if (!g->json_out.empty()) write_text(g->json_out, out.dump(2) + "\n");
    if (!g->csv_out.empty()) write_text(g->csv_out, t.csv());
    if (!g->md_out.empty()) write_text(g->md_out, t.markdown() + "\n" + nt.markdown());
  });
}

// ---------------------------------------------------------------- cost
void print_cost(const json& r) {
  const auto& c = r["config"];
  const auto& d = r["device"];
  const auto& w = r["workload"];
  std::cout << r["model"].get<std::string>() << " (" << r["model_type"].get<std::string>() << "): hidden "
            << c["hidden"] << ", intermediate " << c["intermediate"] << ", " << c["layers"] << " layers ("
            << c["global_layers"] << " global, " << c["sliding_layers"] << " sliding window " << c["sliding_window"]
            << "), heads " << c["heads"] << "/" << c["kv_heads"] << " kv, head_dim " << c["head_dim"] << ", vocab "
            << c["vocab"] << "\n";
  std::cout << "device " << d["name"].get<std::string>() << " (" << d["full_name"].get<std::string>() << "): "
            << num(d["peak_tflops"].get<double>(), "%.4g") << " TFLOP/s " << d["peak_dtype"].get<std::string>()
            << " matrix, " << num(d["f32_tflops"].get<double>(), "%.4g") << " TFLOP/s f32 vector, "
            << num(d["mem_bw_gbs"].get<double>(), "%.0f") << " GB/s, ridge "
            << num(d["ridge_flop_per_byte"].get<double>(), "%.1f") << " FLOP/B\n";
  std::cout << "workload: " << w["phase"].get<std::string>() << ", batch " << w["batch"]
            << (w["phase"] == "prefill" ? ", prefill length " + std::to_string(w["prefill"].get<int64_t>())
                                        : ", context " + std::to_string(w["context"].get<int64_t>()))
            << " (" << w["tokens"] << " tokens), " << w["compute_dtype"].get<std::string>() << "\n\n";
  std::cout << "one " << r["layer_kind"].get<std::string>() << "-attention decoder layer:\n";
  Table t{{"op", "MACs", "FLOPs", "weights B", "act B", "KV B", "bytes", "FLOP/B", "bound", "floor"}};
  auto add = [&](const json& o) {
    t.rows.push_back({o["name"].get<std::string>(), si(o["macs"].get<double>()), si(o["flops"].get<double>()),
                      si(o["weight_bytes"].get<double>()), si(o["act_bytes"].get<double>()),
                      si(o["kv_bytes"].get<double>()), si(o["bytes"].get<double>()),
                      num(o["intensity"].get<double>(), "%.2f"), o["bound"].get<std::string>(),
                      seconds_str(o["floor_s"].get<double>())});
  };
  for (const auto& o : r["ops"]) add(o);
  add(r["layer_total"]);
  std::cout << t.text() << "\nmodel head (embedding, final norm, LM head):\n";
  Table h{t.head, {}};
  for (const auto& o : r["head_ops"]) {
    t.rows.clear();
    add(o);
    h.rows.push_back(t.rows[0]);
  }
  std::cout << h.text();
  const auto& tt = r["totals"];
  std::cout << "\nwhole model: params " << si(r["params_total"].get<double>()) << " (per layer "
            << si(r["params_per_layer"].get<double>()) << ", embedding " << si(r["params_embedding"].get<double>())
            << "); " << si(tt["macs"].get<double>()) << " MACs, " << si(tt["flops"].get<double>()) << " FLOPs, "
            << si(tt["bytes"].get<double>()) << "B moved (weights " << si(tt["weight_bytes"].get<double>())
            << "B, activations " << si(tt["act_bytes"].get<double>()) << "B, KV " << si(tt["kv_bytes"].get<double>())
            << "B), intensity " << num(tt["intensity"].get<double>(), "%.2f") << " FLOP/B: "
            << tt["bound"].get<std::string>() << "-bound\n";
  std::cout << "time floor: " << seconds_str(tt["floor_s"].get<double>()) << " (sum of per-op floors; whole-step "
            << seconds_str(tt["floor_whole_s"].get<double>()) << "), "
            << num(tt["tokens_per_s_at_floor"].get<double>(), "%.4g") << " tokens/s at the floor\n";
  std::cout << "KV cache per token: " << r["kv_cache_bytes_per_token"].get<double>() << " B (global layers "
            << r["kv_cache_bytes_per_token_global"].get<double>() << " B, sliding layers "
            << r["kv_cache_bytes_per_token_sliding"].get<double>() << " B"
            << (r["kv_cache_window"].get<int64_t>() > 0
                    ? ", kept for at most " + std::to_string(r["kv_cache_window"].get<int64_t>()) + " tokens"
                    : std::string())
            << ")\n";
  const auto& m = r["memory"];
  std::cout << "memory: weights " << si(m["weights_bytes"].get<double>()) << "B + KV " << si(m["kv_cache_bytes"].get<double>())
            << "B + activations " << si(m["activation_bytes"].get<double>()) << "B = " << si(m["total_bytes"].get<double>())
            << "B of " << si(m["usable_bytes"].get<double>()) << "B usable (90%): "
            << (m["fits"].get<bool>() ? "fits" : "does not fit");
  if (!m["fits"].get<bool>()) std::cout << "; tensor parallel degree " << m["tensor_parallel_degree"] << " fits";
  const auto& tr = m["train_bytes_per_gpu"];
  std::cout << "\ntraining (mixed-precision Adam, no activations), per GPU at dp=" << m["dp"] << ": DDP "
            << si(tr["ddp"].get<double>()) << "B, ZeRO-1 " << si(tr["zero1"].get<double>()) << "B, ZeRO-2 "
            << si(tr["zero2"].get<double>()) << "B, ZeRO-3 " << si(tr["zero3"].get<double>()) << "B\n";
  const auto& dpj = r["data_parallel"];
  if (dpj["link_gbs"].get<double>() > 0 && dpj["dp"].get<int>() > 1)
    std::cout << "data parallel (flashkit train --dp " << dpj["dp"] << "): gradient all-reduce "
              << si(dpj["grad_bytes"].get<double>()) << "B in " << dpj["allreduce_s"].get<double>() * 1e3
              << " ms + parameter all-gather " << dpj["allgather_s"].get<double>() * 1e3 << " ms per step (ring at "
              << dpj["link_gbs"].get<double>() << " GB/s per direction)\n";
}

void add_cost(CLI::App& app) {
  auto* cs = app.add_subcommand("cost", "Per-op cost of one decoder layer, model totals, KV cache and memory");
  cs->require_subcommand(0, 1);
  struct Opts {
    std::string model, device = "h200", dtype = "bf16", layer_kind, sweep, out;
    int64_t prefill = -1, decode_batch = -1, context = 1024, batch = 1, sweep_min = 0, sweep_max = 0;
    int dp = 8;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cs->add_option("-m,--model", o->model, "Model directory (with config.json) or config file");
  cs->add_option("--device", o->device, "Device from the hardware table (default h200); 'cpu' measures this CPU");
  cs->add_option("--prefill", o->prefill, "Prefill: tokens per sequence (default 512 when no --decode-batch)")
      ->check(int_range(1, limits::kMaxBenchSeqlen));
  cs->add_option("--decode-batch", o->decode_batch, "Decode: sequences decoding one token each")
      ->check(int_range(1, limits::kMaxBenchBatch));
  cs->add_option("--context", o->context, "Decode: keys each token attends to (default 1024)")
      ->check(int_range(1, limits::kMaxBenchSeqlen));
  cs->add_option("--batch", o->batch, "Prefill: number of sequences (default 1)")->check(int_range(1, limits::kMaxBenchBatch));
  cs->add_option("--dtype", o->dtype, "Compute dtype: bf16 (default), f16, fp8 (weights 1 B), f32");
  cs->add_option("--layer-kind", o->layer_kind, "Which layer the per-op table shows: global or sliding");
  cs->add_option("--dp", o->dp, "Data-parallel degree for the ZeRO training memory (default 8)")
      ->check(int_range(1, 1 << 20));
  cs->add_option("--sweep", o->sweep, "decode (batch 1..64) or prefill (length 64..4096)");
  cs->add_option("--sweep-min", o->sweep_min, "Sweep start (default 1 or 64)")->check(int_range(1, limits::kMaxBenchSeqlen));
  cs->add_option("--sweep-max", o->sweep_max, "Sweep end (default 64 or 4096)")->check(int_range(1, limits::kMaxBenchSeqlen));
  cs->add_flag("--json", o->json, "Print JSON instead of tables");
  cs->add_option("--out", o->out, "Also write the JSON to FILE");

  struct AOpts {
    int64_t n = 4096, d = 64;
    std::string dtype = "f32", out;
    bool json = false, check = false;
    double onchip_kb = 0;
  };
  auto a = std::make_shared<AOpts>();
  auto* at = cs->add_subcommand("attention", "HBM traffic of standard vs flash attention and speedup per device");
  at->add_option("-N,--seqlen", a->n, "Sequence length N (default 4096)")->check(int_range(1, int64_t(1) << 30));
  at->add_option("-d,--head-dim", a->d, "Head dimension d (default 64)")->check(int_range(1, 65536));
  at->add_option("--dtype", a->dtype, "Element type for bytes and peak: f32 (default, the teaching case), bf16");
  at->add_option("--onchip-kb", a->onchip_kb, "Override the on-chip size M (KiB) for every device (default: smem per SM)")
      ->check(real_range(0, 1 << 30));
  at->add_flag("--check", a->check, "Also run flashkit's CPU standard and flash attention at (N, d) and compare their byte counts");
  at->add_flag("--json", a->json, "Print JSON");
  at->add_option("--out", a->out, "Also write the JSON to FILE");

  cs->callback([o, at] {
    if (at->parsed()) return;
    if (o->model.empty()) bad("cost: -m/--model is required (a directory with config.json, or a config file)");
    const an::DeviceSpec dev = an::find_device(o->device);
    an::Workload w;
    if (o->decode_batch != -1) {
      need_positive(o->decode_batch, "--decode-batch");
      need_positive(o->context, "--context");
      w.decode = true;
      w.batch = o->decode_batch;
      w.context = o->context;
      if (o->prefill != -1) bad("give either --prefill or --decode-batch, not both");
    } else {
      if (o->prefill != -1) need_positive(o->prefill, "--prefill");
      need_positive(o->batch, "--batch");
      need_positive(o->context, "--context");
      w.prefill = o->prefill == -1 ? 512 : o->prefill;
      w.batch = o->batch;
      w.context = o->context;
    }
    std::string used;
    an::peak_tflops(dev, o->dtype, &used);  // validates the dtype
    w.compute_dtype = o->dtype;
    const double e = o->dtype == "f32" ? 4 : o->dtype == "fp8" ? 1 : 2;
    w.weight_bytes = e;
    w.act_bytes = o->dtype == "f32" ? 4 : 2;
    w.kv_bytes = o->dtype == "f32" ? 4 : 2;
    const an::ModelConfig c = an::load_model_config(o->model);
    if (!o->sweep.empty()) {
      const bool dec = o->sweep == "decode";
      const int64_t lo = o->sweep_min > 0 ? o->sweep_min : (dec ? 1 : 64);
      const int64_t hi = o->sweep_max > 0 ? o->sweep_max : (dec ? 64 : 4096);
      const json s = an::cost_sweep(c, w, dev, o->sweep, lo, hi);
      if (!o->out.empty()) write_text(o->out, s.dump(2) + "\n");
      if (o->json) {
        std::cout << s.dump(2) << "\n";
        return;
      }
      Table t{{s["x_name"].get<std::string>(), "tokens", "FLOPs", "bytes", "FLOP/B", "bound", "matmul FLOP/B",
               "matmul bound", "floor", "tokens/s", "attainable TF/s"}};
      for (const auto& p : s["points"])
        t.rows.push_back({std::to_string(p["x"].get<int64_t>()), std::to_string(p["tokens"].get<int64_t>()),
                          si(p["flops"].get<double>()), si(p["bytes"].get<double>()),
                          num(p["intensity"].get<double>(), "%.1f"), p["bound"].get<std::string>(),
                          num(p["matmul_intensity"].get<double>(), "%.1f"), p["matmul_bound"].get<std::string>(),
                          seconds_str(p["floor_s"].get<double>()), num(p["tokens_per_s"].get<double>(), "%.4g"),
                          num(p["attainable_tflops"].get<double>(), "%.4g")});
      std::cout << c.name << " on " << dev.name << ", " << o->sweep << " sweep (whole model, one step):\n" << t.text();
      std::cout << "ridge " << num(s["ridge"].get<double>(), "%.1f") << " FLOP/B; matrix products compute-bound from "
                << s["x_name"].get<std::string>() << " = " << s["crossover_matmul"] << " (weight GEMMs alone from "
                << s["crossover_weight_gemms"] << "); whole step (unfused "
                << "elementwise traffic included) from " << s["crossover"] << " (-1: not up to 2^20)\n";
      return;
    }
    const json r = an::cost_report(c, w, dev, o->dp, o->layer_kind);
    if (!o->out.empty()) write_text(o->out, r.dump(2) + "\n");
    if (o->json) std::cout << r.dump(2) << "\n";
    else print_cost(r);
  });

  at->callback([a] {
    need_positive(a->n, "-N/--seqlen");
    need_positive(a->d, "-d/--head-dim");
    if (a->dtype != "f32" && a->dtype != "bf16" && a->dtype != "f16") bad("--dtype must be f32, bf16 or f16");
    const double e = a->dtype == "f32" ? 4 : 2;
    if (a->onchip_kb < 0) bad("--onchip-kb must be positive");
    json r = an::attention_io_report(a->n, a->d, e, a->dtype, a->onchip_kb * 1024);
    if (a->check) {
      // flashkit's own CPU kernels at (N, d), one head, f32: their OpCost byte counts next to the model's.
      if (a->n > 16384) bad("--check runs the standard kernel (N^2 workspace): use N <= 16384");
      const int64_t N = a->n, d = a->d;
      std::vector<float> q(static_cast<size_t>(N * d), 0.01f), k(q), v(q), o(q), lse(static_cast<size_t>(N));
      auto Q = TensorView::contiguous(q.data(), DType::f32, {1, N, 1, d});
      auto K = TensorView::contiguous(k.data(), DType::f32, {1, N, 1, d});
      auto V = TensorView::contiguous(v.data(), DType::f32, {1, N, 1, d});
      auto O = TensorView::contiguous(o.data(), DType::f32, {1, N, 1, d});
      auto L = TensorView::contiguous(lse.data(), DType::f32, {1, 1, N});
      json chk = json::array();
      const double m_bytes = a->onchip_kb > 0 ? a->onchip_kb * 1024 : double(flash_onchip_bytes(Device::cpu));
      const an::AttnIo io = an::attention_io(double(N), double(d), m_bytes / 4);
      for (const char* name : {"standard", "flash"}) {
        AttentionOptions opt;
        parse_impl(name, &opt.impl);
        OpCost cost;
        attention_forward(Q, K, V, O, L, opt, &cost);
        const double bytes = cost.bytes_read + cost.bytes_written;
        const double model = (std::string(name) == "standard" ? io.std_fwd : io.flash_fwd) * 4;
        chk.push_back({{"impl", name}, {"kernel", cost.kernel}, {"flashkit_bytes", bytes}, {"io_model_bytes", model},
                       {"ratio", bytes / model}, {"flashkit_model", cost.model}, {"flops", cost.flops}});
      }
      r["cpu_check"] = {{"M_bytes", m_bytes}, {"rows", chk},
                        {"note", "io_model = Dao et al. Algorithm 0/1 with M = flashkit's CPU on-chip size (or --onchip-kb); flashkit's "
                                 "flash kernel uses the FlashAttention-2 loop order (Q outer), so its K/V traffic is "
                                 "per query tile rather than Q/O per KV block"}};
    }
    if (!a->out.empty()) write_text(a->out, r.dump(2) + "\n");
    if (a->json) {
      std::cout << r.dump(2) << "\n";
      return;
    }
    std::cout << "one head, N = " << a->n << ", d = " << a->d << ", " << a->dtype << " (" << e << " B/element)\n"
              << "teaching counts: standard N(4d + 4N) = " << si(r["teaching_std_floats"].get<double>())
              << " floats, flash N(5d + 4) = " << si(r["teaching_flash_floats"].get<double>()) << " floats\n";
    Table t{{"device", "peak TF", "BW GB/s", "M elems", "Bc", "std fwd B", "flash fwd B", "fwd speedup", "std bwd B",
             "flash bwd B", "bwd speedup", "teaching speedup"}};
    for (const auto& d : r["devices"])
      t.rows.push_back({d["device"].get<std::string>(), num(d["peak_tflops"].get<double>(), "%.4g"),
                        num(d["bw_gbs"].get<double>(), "%.0f"), num(d["M_elems"].get<double>(), "%.0f"),
                        std::to_string(d["Bc"].get<int64_t>()), si(d["std_fwd_bytes"].get<double>()),
                        si(d["flash_fwd_bytes"].get<double>()), num(d["fwd_speedup"].get<double>(), "%.2f"),
                        si(d["std_bwd_bytes"].get<double>()), si(d["flash_bwd_bytes"].get<double>()),
                        num(d["bwd_speedup"].get<double>(), "%.2f"), num(d["teaching_speedup"].get<double>(), "%.2f")});
    std::cout << t.text() << "time = FLOPs/peak + bytes/bandwidth; M = shared memory per SM.\n";
    if (r.contains("cpu_check")) {
      std::cout << "\nflashkit CPU kernels (OpCost) vs the IO model, M = "
                << r["cpu_check"]["M_bytes"].get<double>() / 1024 << " KiB:\n";
      for (const auto& c : r["cpu_check"]["rows"])
        std::cout << "  " << c["impl"].get<std::string>() << ": flashkit " << si(c["flashkit_bytes"].get<double>())
                  << "B, model " << si(c["io_model_bytes"].get<double>()) << "B, ratio "
                  << num(c["ratio"].get<double>(), "%.3f") << "  (" << c["flashkit_model"].get<std::string>() << ")\n";
    }
  });
}

// ---------------------------------------------------------------- profile
void add_profile(CLI::App& app) {
  auto* pr = app.add_subcommand("profile", "Profile a workload: Chrome/Perfetto trace and summary by time");
  pr->require_subcommand(1);
  struct Opts {
    std::string trace, json_out;  // no file is written unless asked for
    int64_t n = int64_t(1) << 24;
    int reps = 3;
    an::AttentionProfileArgs att;
    std::string impls = "standard,flash";
    bool gpu = false;
    std::string dtype = "bf16";
    int warmup = 3;
  };
  auto o = std::make_shared<Opts>();
  auto common = [&](CLI::App* s) {
    s->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace to FILE (open in ui.perfetto.dev; default: none)");
    add_json_option(s, &o->json_out, "the summary and results");
    s->add_option("--reps", o->reps, "Repetitions (default 3)")->check(int_range(1, limits::kMaxBenchReps));
  };
  auto* ge = pr->add_subcommand("gelu", "tanh-GELU as 8 separate elementwise kernels vs 1 fused kernel");
  ge->add_option("--n", o->n, "Elements (default 16M = 64 MB of f32; with --gpu 256M)")
      ->check(int_range(1, limits::kMaxBenchElements));
  ge->add_flag("--gpu", o->gpu, "Run as CUDA kernels on GPU 0 (CUDA events, median after warm-up, NVTX ranges)");
  ge->add_option("--dtype", o->dtype, "--gpu: bf16 (default) or f32");
  ge->add_option("--warmup", o->warmup, "--gpu: untimed runs before timing (default 3)")
      ->check(int_range(0, limits::kMaxBenchReps));
  common(ge);
  struct DOpts {
    std::string model, gemv = "gemv";
    int64_t context = 1024, layers = 0;
  };
  auto dopt = std::make_shared<DOpts>();
  auto* de = pr->add_subcommand(
      "decode", "Synthetic batch-1 decode step (gemma-3-270m shape): launch plan; --gpu: eager vs CUDA graph");
  de->add_option("-m,--model", dopt->model, "Model config for the shape (default: gemma-3-270m built in)");
  de->add_option("--context", dopt->context, "Keys a global layer attends to (default 1024; sliding layers: window)")
      ->check(int_range(1, limits::kMaxBenchSeqlen));
  de->add_option("--layers", dopt->layers, "Override the layer count")->check(int_range(1, limits::kMaxBenchLayers));
  de->add_flag("--gpu", o->gpu, "Run on GPU 0: eagerly, launch by launch, then as one CUDA graph (CUDA events)");
  de->add_option("--warmup", o->warmup, "--gpu: untimed steps before timing (default 3)")
      ->check(int_range(0, limits::kMaxBenchReps));
  de->add_option("--gemv", dopt->gemv, "--gpu: gemv (cuBLAS bf16 GEMV, default) or gemmex (cublasGemmEx with N = 1)");
  common(de);
  auto* at = pr->add_subcommand("attention", "Standard vs flash attention (forward, optionally backward)");
  at->add_option("--batch", o->att.batch, "Batch (default 1)")->check(int_range(1, limits::kMaxBenchBatch));
  at->add_option("--heads", o->att.heads, "Heads (default 8)")->check(int_range(1, limits::kMaxBenchHeads));
  at->add_option("--kv-heads", o->att.kv_heads, "KV heads (default = heads)")->check(int_range(1, limits::kMaxBenchHeads));
  at->add_option("-N,--seqlen", o->att.seqlen, "Sequence length (default 1024)")->check(int_range(1, limits::kMaxBenchSeqlen));
  at->add_option("-d,--head-dim", o->att.head_dim, "Head dim (default 64)")->check(int_range(8, 256));
  at->add_flag("--causal", o->att.causal, "Causal mask");
  at->add_flag("--backward", o->att.backward, "Also the backward pass");
  at->add_option("--impl", o->impls, "Comma-separated: standard,flash,reference");
  at->add_flag("--gpu", o->gpu, "Run on CUDA device 0 in bf16, timed with CUDA events, on the GPU's datasheet roof");
  common(at);

  struct LOpts {
    std::string model, kind;
    int64_t prefill = -1, decode_batch = -1, context = 1024;
  };
  auto lo = std::make_shared<LOpts>();
  auto* ly = pr->add_subcommand("layer", "One decoder layer of a model on this CPU (f32): per-op floor vs measured");
  ly->add_option("-m,--model", lo->model, "Model directory or config file")->required();
  ly->add_option("--prefill", lo->prefill, "Prefill length (default 512)")->check(int_range(1, limits::kMaxBenchSeqlen));
  ly->add_option("--decode-batch", lo->decode_batch, "Decode: sequences, one token each")
      ->check(int_range(1, limits::kMaxBenchBatch));
  ly->add_option("--context", lo->context, "Decode: keys per sequence (default 1024)")
      ->check(int_range(1, limits::kMaxBenchSeqlen));
  ly->add_option("--layer-kind", lo->kind, "global (default when the model has one) or sliding");
  common(ly);

  auto finish = [o](an::Profiler& p, json result) {
    std::cout << p.summary_table();
    if (!o->trace.empty()) {
      p.write_chrome_trace(o->trace);
      std::cout << "trace: " << o->trace << " (" << p.events().size() << " events; chrome://tracing or ui.perfetto.dev)\n";
    }
    if (!o->json_out.empty())
      write_text(o->json_out, json{{"summary", p.summary_json()}, {"result", result}}.dump(2) + "\n");
  };
  ge->callback([o, ge, finish] {
    const TextToStderr json_stdout(o->json_out == "-");
    if (o->gpu) {
      if (ge->count("--n") == 0) o->n = int64_t(1) << 28;
      if (ge->count("--reps") == 0) o->reps = 20;
    }
    need_positive(o->n, "--n");
    need_positive(o->reps, "--reps");
    if (o->warmup < 0) bad("--warmup must not be negative");
    if (o->gpu) {
      if (o->dtype != "bf16" && o->dtype != "f32") bad("--dtype must be bf16 or f32");
      const an::GpuDemoResult g = an::gpu_gelu_demo(o->n, o->dtype, o->reps, o->warmup);
      if (!g.available) bad("profile gelu --gpu: " + g.error);
      const json& r = g.result;
      an::DeviceSpec gd;
      const bool known = an::match_device(r["gpu"].get<std::string>(), &gd);
      // The datasheet roof when the GPU is in the table; otherwise the copy bandwidth measured in this run.
      const an::Roof roof = known ? an::roof_of(gd, o->dtype) : an::Roof{1e15, r["copy_gbs"].get<double>() * 1e9};
      an::Profiler p(roof);
      double t = 0;
      auto add = [&](const std::string& name, double ms, double flops, double bytes) {
        p.record({name, "kernel", t, ms * 1e3, flops, bytes, json{{"timing", "CUDA events, median of reps"}}});
        t += ms * 1e3;
      };
      for (const auto& k : r["separate"]["per_kernel"])
        add(k["name"].get<std::string>(), k["median_ms"].get<double>(), k["flops"].get<double>(), k["bytes"].get<double>());
      add("gelu.fused(1 kernel)", r["fused"]["median_ms"].get<double>(), r["fused"]["flops"].get<double>(),
          r["fused"]["bytes"].get<double>());
      json res = r;
      res["device"] = known ? gd.name : "";
      res["datasheet_bw_gbs"] = known ? gd.mem_bw_gbs : 0.0;
      finish(p, res);
      Table tb{{"variant", "kernels", "bytes", "median", "GB/s", "% copy BW", "floor (copy BW)"}};
      for (const char* v : {"separate", "fused"}) {
        const auto& x = r[v];
        tb.rows.push_back({v, std::to_string(x["kernels"].get<int>()), si(x["bytes"].get<double>()) + "B",
                           seconds_str(x["median_ms"].get<double>() * 1e-3), num(x["gb_per_s"].get<double>(), "%.0f"),
                           num(x["pct_of_copy_bw"].get<double>(), "%.1f"),
                           seconds_str(x["floor_ms_copy_bw"].get<double>() * 1e-3)});
      }
      std::cout << "\n" << r["gpu"].get<std::string>() << ", tanh-GELU on " << o->n << " " << o->dtype
                << " elements; copy bandwidth measured now " << num(r["copy_gbs"].get<double>(), "%.0f") << " GB/s\n"
                << tb.text() << "speedup " << num(r["speedup"].get<double>(), "%.2f") << "x, bytes "
                << num(r["bytes_ratio"].get<double>(), "%.0f") << "x, max |separate - fused| (first "
                << r["compared_elements"] << ") " << num(r["max_abs_diff_prefix"].get<double>(), "%.2g") << "\n";
      return;
    }
    check_memory(double(o->n) * 4 * 5, "profile gelu --n " + std::to_string(o->n) + " (five f32 arrays)");
    an::Profiler p(an::roof_of(an::local_cpu_spec(), "f32"));
    const Activity act("profiling gelu");
    const json r = an::profile_gelu(p, o->n, o->reps);
    finish(p, r);
    std::cout << "\nseparate: " << r["separate"]["kernels"] << " kernels, " << si(r["separate"]["bytes"].get<double>())
              << "B, " << num(r["separate"]["ms"].get<double>(), "%.3f") << " ms;  fused: 1 kernel, "
              << si(r["fused"]["bytes"].get<double>()) << "B, " << num(r["fused"]["ms"].get<double>(), "%.3f")
              << " ms;  speedup " << num(r["speedup"].get<double>(), "%.2f") << "x (bytes 9x), max |diff| "
              << num(r["max_abs_diff"].get<double>(), "%.2g") << "\n";
  });
  de->callback([o, de, dopt, finish] {
    const TextToStderr json_stdout(o->json_out == "-");
    if (de->count("--reps") == 0) o->reps = 50;
    need_positive(o->reps, "--reps");
    need_positive(dopt->context, "--context");
    if (o->warmup < 0) bad("--warmup must not be negative");
    if (dopt->gemv != "gemv" && dopt->gemv != "gemmex") bad("--gemv must be gemv or gemmex");
    an::DecodeShape shape;
    if (!dopt->model.empty()) shape = an::decode_shape_from_config(an::load_model_config(dopt->model), dopt->context);
    shape.context = dopt->context;
    if (de->count("--layers")) {
      need_positive(dopt->layers, "--layers");
      shape.layers = dopt->layers;
    }
    const json plan = an::decode_step_plan(shape);  // validates the shape
    Table pt{{"op", "kind", "launches", "bytes", "FLOPs"}};
    for (const auto& op : plan["ops"])
      pt.rows.push_back({op["name"].get<std::string>(), op["kind"].get<std::string>(), std::to_string(op["count"].get<int64_t>()),
                         si(op["bytes"].get<double>()) + "B", si(op["flops"].get<double>())});
    std::cout << plan["model"].get<std::string>() << " decode step, batch 1, context " << shape.context << ": "
              << plan["launches"] << " launches (" << plan["cublas_calls"] << " cuBLAS GEMVs, " << plan["kernels"]
              << " kernels), " << si(plan["bytes"].get<double>()) << "B moved (weights "
              << si(plan["weight_bytes"].get<double>()) << "B, KV cache " << si(plan["kv_cache_bytes_read"].get<double>())
              << "B)\n" << pt.text();
    if (!o->gpu) {
      std::cout << "(plan only; --gpu runs it eagerly and as a CUDA graph)\n";
      if (!o->json_out.empty()) write_text(o->json_out, json{{"plan", plan}}.dump(2) + "\n");
      return;
    }
    const an::GpuDemoResult g = an::gpu_decode_demo(shape, o->reps, o->warmup, dopt->gemv);
    if (!g.available) bad("profile decode --gpu: " + g.error);
    json r = g.result;
    an::DeviceSpec gd;
    const bool known = an::match_device(r["gpu"].get<std::string>(), &gd);
    const an::Roof roof = known ? an::roof_of(gd, "bf16") : an::Roof{1e15, 1e12};
    const double bytes = plan["bytes"].get<double>(), flops = plan["flops"].get<double>();
    const double floor_us = roof.floor_max(flops, bytes) * 1e6;
    r["plan"] = plan;
    r["device"] = known ? gd.name : "";
    r["floor_us"] = known ? floor_us : 0.0;
    an::Profiler p(roof);
    const double em = r["eager"]["median_us"].get<double>(), gm = r["graph"]["median_us"].get<double>();
    p.record({"decode.step.eager", "step", 0, em, flops, bytes, json{{"launches", r["launches_per_step"]}}});
    p.record({"decode.step.graph", "step", em, gm, flops, bytes, json{{"graph_nodes", r["graph_nodes"]}}});
    finish(p, r);
    const double n = r["launches_per_step"].get<double>();
    Table tb{{"variant", "median/step", "min/step", "per launch", "host enqueue", "floor", "measured/floor"}};
    tb.rows.push_back({"eager", seconds_str(em * 1e-6), seconds_str(r["eager"]["min_us"].get<double>() * 1e-6),
                       seconds_str(em / n * 1e-6), seconds_str(r["eager"]["host_enqueue_median_us"].get<double>() * 1e-6),
                       known ? seconds_str(floor_us * 1e-6) : "-", known ? num(em / floor_us, "%.2f") : "-"});
    tb.rows.push_back({"graph", seconds_str(gm * 1e-6), seconds_str(r["graph"]["min_us"].get<double>() * 1e-6),
                       seconds_str(gm / n * 1e-6), seconds_str(r["graph"]["host_launch_median_us"].get<double>() * 1e-6),
                       known ? seconds_str(floor_us * 1e-6) : "-", known ? num(gm / floor_us, "%.2f") : "-"});
    std::cout << "\n" << r["gpu"].get<std::string>() << ", " << r["launches_per_step"] << " launches per step ("
              << r["graph_nodes"] << " graph nodes; GEMVs: " << r["gemv"].get<std::string>() << "), median of " << o->reps << " after " << o->warmup << " warm-up:\n"
              << tb.text() << "gap (eager - graph) " << num(r["gap_us"].get<double>(), "%.1f") << " us per step = "
              << num(r["gap_us_per_launch"].get<double>(), "%.2f") << " us per launch; graph speedup "
              << num(r["speedup"].get<double>(), "%.2f") << "x; max |eager - graph| "
              << num(r["max_abs_diff_eager_vs_graph"].get<double>(), "%.2g") << "\n";
  });
  ly->callback([o, lo, finish] {
    const TextToStderr json_stdout(o->json_out == "-");
    need_positive(o->reps, "--reps");
    const an::ModelConfig c = an::load_model_config(lo->model);
    an::LayerProfileArgs la;
    la.reps = o->reps;
    if (lo->decode_batch != -1) {
      need_positive(lo->decode_batch, "--decode-batch");
      need_positive(lo->context, "--context");
      la.decode = true, la.batch = lo->decode_batch, la.context = lo->context;
    } else {
      if (lo->prefill != -1) need_positive(lo->prefill, "--prefill");
      la.prefill = lo->prefill == -1 ? 512 : lo->prefill;
    }
    if (!lo->kind.empty() && lo->kind != "global" && lo->kind != "sliding") bad("--layer-kind must be global or sliding");
    la.global = lo->kind.empty() ? c.global_layers() > 0 : lo->kind == "global";
    {  // what profile_layer allocates (f32): one layer's weights, the activations of T tokens, the KV cache
      const double T = la.decode ? double(la.batch) : double(la.prefill), S = la.decode ? double(la.context) : T;
      const double B = la.decode ? double(la.batch) : 1.0, h = double(c.hidden), I = double(c.intermediate);
      const double q = double(c.heads * c.head_dim), kv = double(c.kv_heads * c.head_dim);
      const double weights = h * (2 * q + 2 * kv) + 3 * h * I;
      const double acts = T * (6 * h + 2 * q + kv + 2 * I + double(c.head_dim));
      check_memory(4 * (weights + acts + 2 * B * S * kv), "profile layer (one layer's weights, activations and KV "
                                                          "cache in f32)");
    }
    an::Profiler p(an::roof_of(an::local_cpu_spec(), "f32"));
    const Activity act("profiling the layer");
    const json r = an::profile_layer(p, c, la);
    finish(p, r);
    Table t{{"op", "FLOPs", "bytes", "FLOP/B", "bound", "floor", "measured", "measured/floor"}};
    for (const auto& op : r["ops"])
      t.rows.push_back({op["name"].get<std::string>(), si(op["flops"].get<double>()), si(op["bytes"].get<double>()),
                        num(op["intensity"].get<double>(), "%.2f"), op["bound"].get<std::string>(),
                        seconds_str(op["floor_s"].get<double>()), seconds_str(op["measured_s"].get<double>()),
                        num(op["ratio"].get<double>(), "%.2f")});
    t.rows.push_back({"layer", "", "", "", "", seconds_str(r["predicted_floor_s"].get<double>()),
                      seconds_str(r["measured_s"].get<double>()), num(r["ratio"].get<double>(), "%.2f")});
    std::cout << "\n" << c.name << ", one " << r["layer_kind"].get<std::string>() << " layer, "
              << r["phase"].get<std::string>() << ", " << r["tokens"] << " tokens, f32 (best of " << o->reps << "):\n"
              << t.text();
    const auto& ac = r["attention_opcost"];
    double model_flops = 0;
    for (const auto& op : r["ops"])
      if (op["name"] == "attention(flash)") model_flops = op["flops"].get<double>();
    std::cout << "flashkit's own OpCost for the attention call (" << ac["kernel"].get<std::string>() << "): "
              << si(ac["flops"].get<double>()) << " FLOPs executed, " << si(ac["bytes"].get<double>())
              << "B; the cost model's minimum: " << si(model_flops) << " FLOPs\n";
  });
  at->callback([o, at, finish] {
    const TextToStderr json_stdout(o->json_out == "-");
    need_positive(o->reps, "--reps");
    if (at->count("--kv-heads") == 0) o->att.kv_heads = o->att.heads;
    o->att.reps = o->reps;
    o->att.impls.clear();
    std::stringstream ss(o->impls);
    for (std::string s; std::getline(ss, s, ',');)
      if (!s.empty()) o->att.impls.push_back(s);
    if (o->gpu) {
      // GPU: bf16, CUDA-event timing per call; NVTX ranges (CUDA builds) name each measured call for Nsight.
      const std::string name = an::gpu_name();
      an::DeviceSpec gd;
      if (name.empty()) {
        const an::GpuAttentionTiming t = an::cuda_attention_time(1, 1, 1, 1, 1, false, false, "flash", 1);
        bad("profile attention --gpu: " + t.error);
      }
      if (!an::match_device(name, &gd)) bad("profile attention --gpu: GPU '" + name + "' is not in the hardware table");
      an::Profiler p(an::roof_of(gd, "bf16"));
      json rows = json::array();
      const auto& a = o->att;
      for (const auto& impl : o->att.impls) {
        an::GpuAttentionTiming t;
        {
          an::ScopedRange host(p, "host.attention." + impl, 0, 0, "host");
          t = an::cuda_attention_time(a.batch, a.heads, a.kv_heads, a.seqlen, a.head_dim, a.causal, a.backward, impl,
                                      a.reps);
        }
        if (!t.available) bad("profile attention --gpu (" + impl + "): " + t.error);
        auto add = [&](const char* pass, double sec, double flops, double bytes) {
          const bool bwd = std::string(pass) == "bwd";
          const std::string& kern = bwd ? t.bwd_kernel : t.kernel;
          an::ProfileEvent e{"attention." + std::string(pass) + "." + impl + ".cuda", "kernel", p.now_us(), sec * 1e6,
                             flops, bytes, json{{"kernel", kern}, {"timing", "CUDA events, best of reps"}}};
          p.record(e);
          const double fl = p.roof().floor_max(flops, bytes);
          rows.push_back({{"impl", impl}, {"pass", pass}, {"kernel", kern}, {"flops", flops}, {"bytes", bytes},
                          {"best_ms", sec * 1e3}, {"floor_ms", fl * 1e3}, {"measured_over_floor", sec / fl},
                          {"bound", an::bound_name(p.roof().bound(flops / bytes))}, {"model", bwd ? t.bwd_model : t.model}});
        };
        add("fwd", t.fwd_s, t.fwd_flops, t.fwd_bytes);
        if (a.backward) add("bwd", t.bwd_s, t.bwd_flops, t.bwd_bytes);
      }
      const json r = {{"device", gd.name}, {"gpu", name}, {"batch", a.batch}, {"heads", a.heads}, {"N", a.seqlen},
                      {"d", a.head_dim}, {"causal", a.causal}, {"rows", rows}};
      finish(p, r);
      for (const auto& row : rows)
        std::cout << row["impl"].get<std::string>() << " " << row["pass"].get<std::string>() << ": best "
                  << num(row["best_ms"].get<double>(), "%.4f") << " ms, floor " << num(row["floor_ms"].get<double>(), "%.4f")
                  << " ms, measured/floor " << num(row["measured_over_floor"].get<double>(), "%.2f") << "\n";
      return;
    }
    {
      const auto& a = o->att;
      if (a.heads % a.kv_heads != 0) bad("--kv-heads must divide --heads (" + std::to_string(a.heads) + ")");
      const double elems = double(a.batch) * double(a.seqlen) * double(2 * a.heads + 2 * a.kv_heads) * double(a.head_dim);
      check_memory(elems * 4 * (a.backward ? 2 : 1), "profile attention: q, k, v, o" +
                                                        std::string(a.backward ? " and their gradients" : "") +
                                                        " at seqlen " + std::to_string(a.seqlen));
    }
    an::Profiler p(an::roof_of(an::local_cpu_spec(), "f32"));
    const Activity act("profiling attention");
    const json r = an::profile_attention(p, o->att);
    finish(p, r);
    std::cout << "\n";
    for (const auto& row : r["rows"])
      std::cout << row["impl"].get<std::string>() << " " << row["pass"].get<std::string>() << ": best "
                << num(row["best_ms"].get<double>(), "%.3f") << " ms, floor " << num(row["floor_ms"].get<double>(), "%.3f")
                << " ms (" << row["bound"].get<std::string>() << "-bound), measured/floor "
                << num(row["measured_over_floor"].get<double>(), "%.2f") << ", bytes " << si(row["bytes"].get<double>())
                << "B, workspace " << si(row["workspace_bytes"].get<double>()) << "B\n";
  });
}

}  // namespace

void add_analysis_commands(CLI::App& app) {
  add_roofline(app);
  add_cost(app);
  add_profile(app);
}

}  // namespace flashkit::cli
