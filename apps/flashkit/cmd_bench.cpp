// flashkit bench attention: times the attention implementations side by side on the same inputs and
// prints, per (seqlen, pass, impl), the median time, achieved GFLOP/s, the bytes the implementation's
// cost model says it moves, its peak extra memory, and the speedup over the standard (materializing)
// implementation. Refusals by the library (Status::out_of_memory: the N x N workspace would not fit) are
// rows of their own; the other implementations still run.
//
// Inputs (q, k, v and, for backward passes, dout) hold random non-zero values and are allocated once per
// seqlen; outputs are allocated per implementation. The bench itself never allocates anything N x N.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_checks.hpp"
#include "commands.hpp"
#include "core/limits.hpp"
#include "flashkit/flashkit.hpp"
#include "profiler.hpp"
#include "roofline.hpp"

namespace flashkit::cli {

namespace {

using json = nlohmann::ordered_json;

struct BenchConfig {
  std::vector<int64_t> seqlens{1024, 4096};
  int64_t batch = 1;
  int64_t heads = 16;
  int64_t kv_heads = 0;  // 0: same as heads
  int64_t head_dim = 64;
  bool causal = false;
  std::string dtype = "f32";
  std::vector<std::string> impls{"standard", "flash"};
  std::string pass = "all";
  int warmup = 1;
  int repeats = 0;  // 0: adaptive
  int threads = 0;  // 0: the library's default
  std::string json_path;
  std::string profile_path;  // Chrome/Perfetto trace of every timed call
  bool quiet = false;        // no per-row progress lines on stderr
  std::string device = "cpu";
};

constexpr double kAdaptiveSeconds = 1.0;  // adaptive repeats: about this much timed work per row
constexpr int kAdaptiveMin = 3;
constexpr int kAdaptiveMax = 20;

// ---- formatting -------------------------------------------------------------------------------------

std::string fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

// Three significant digits, at least one decimal under 100: 0.0123, 1.23, 12.3, 123, 1234.
std::string sig3(double v) {
  const double a = std::fabs(v);
  if (a >= 100) return fixed(v, 0);
  if (a >= 10) return fixed(v, 1);
  if (a >= 1) return fixed(v, 2);
  if (a >= 0.1) return fixed(v, 3);
  return fixed(v, 4);
}

std::string human_bytes(double b) {
  if (b >= 1e9) return sig3(b / 1e9) + " GB";
  if (b >= 1e6) return sig3(b / 1e6) + " MB";
  if (b >= 1e3) return sig3(b / 1e3) + " kB";
  return fixed(b, 0) + " B";
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) {
        std::string s = line.substr(p + 1);
        s.erase(0, s.find_first_not_of(" \t"));
        return s;
      }
    }
  }
  return "unknown cpu";
}

std::string pass_label(const std::string& pass) { return pass == "fwdbwd" ? "fwd+bwd" : pass; }

// ---- memory: host or CUDA buffers through the library's device-memory helpers -----------------------

class Buffer {
 public:
  Buffer(Device device, size_t bytes) : device_(device), bytes_(std::max<size_t>(bytes, 64)) {
    data_ = device_alloc(device_, bytes_);
  }
  ~Buffer() { device_free(device_, data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  void zero() { device_memset(device_, data_, 0, bytes_); }
  void upload(const void* host, size_t bytes) { device_copy(data_, device_, host, Device::cpu, bytes); }

 private:
  Device device_;
  size_t bytes_;
  void* data_ = nullptr;
};

void device_sync(Device device) { device_synchronize(device); }

// Random values in +-[0.05, 1): never zero, never NaN; deterministic per (seed, index).
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void fill_random(void* dst, DType dtype, int64_t n, uint64_t seed) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = splitmix64(seed * 0x100000001b3ull + uint64_t(i));
    const float mag = 0.05f + 0.95f * float(r >> 40) * (1.0f / 16777216.0f);
    const float v = (r & 1) ? mag : -mag;
    switch (dtype) {
      case DType::f32: static_cast<float*>(dst)[i] = v; break;
      case DType::bf16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v); break;
      case DType::f16: static_cast<uint16_t*>(dst)[i] = f32_to_f16(v); break;
      default: break;
    }
  }
}

struct Tensor {
  std::unique_ptr<Buffer> buf;
  TensorView view;
};

Tensor make_tensor(Device device, DType dtype, std::initializer_list<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor t;
  t.buf = std::make_unique<Buffer>(device, size_t(n * dtype_size(dtype)));
  t.view = TensorView::contiguous(t.buf->data(), dtype, shape, device);
  return t;
}

Tensor make_random(Device device, DType dtype, std::initializer_list<int64_t> shape, uint64_t seed) {
  Tensor t = make_tensor(device, dtype, shape);
  const int64_t n = t.view.numel();
  if (device == Device::cpu) {
    fill_random(t.buf->data(), dtype, n, seed);
  } else {
    std::unique_ptr<char[]> host(new char[size_t(n * dtype_size(dtype))]);
    fill_random(host.get(), dtype, n, seed);
    t.buf->upload(host.get(), size_t(n * dtype_size(dtype)));
  }
  return t;
}

Tensor make_zero(Device device, DType dtype, std::initializer_list<int64_t> shape) {
  Tensor t = make_tensor(device, dtype, shape);
  t.buf->zero();  // also faults the pages in, so the first timed run does not pay for it
  return t;
}

// ---- one benchmark row ------------------------------------------------------------------------------

struct Row {
  std::string impl, kernel, pass, model;
  int64_t seqlen = 0;
  std::vector<double> times_ms;
  double median_ms = 0, min_ms = 0;
  OpCost cost;
  std::string status = "ok", message;
  std::optional<double> speedup;  // standard's median / this row's median
};

struct Inputs {
  Tensor q, k, v, dout;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Records one call in the trace: its time, and the FLOPs and bytes of its OpCost.
void trace_call(analysis::Profiler* prof, double start_us, const std::string& name, int64_t seqlen, const OpCost& c) {
  if (!prof) return;
  analysis::ProfileEvent e;
  e.name = name;
  e.category = "attention";
  e.start_us = start_us;
  e.dur_us = prof->now_us() - start_us;
  e.flops = c.flops;
  e.bytes = c.bytes_read + c.bytes_written;
  e.args = {{"seqlen", seqlen}, {"kernel", c.kernel}, {"model", c.model}, {"workspace_bytes", c.workspace_bytes}};
  prof->record(std::move(e));
}

Row run_row(const BenchConfig& cfg, Device device, DType dtype, int64_t seqlen, const std::string& impl_str,
            const std::string& pass, const Inputs& in, analysis::Profiler* prof) {
  Row row;
  row.impl = impl_str;
  row.pass = pass;
  row.seqlen = seqlen;
  AttentionImpl impl = AttentionImpl::automatic;
  parse_impl(impl_str, &impl);
  AttentionOptions opts;
  opts.causal = cfg.causal;
  opts.impl = impl;

  const bool need_bwd = pass != "fwd";
  const int64_t B = cfg.batch, N = seqlen, H = cfg.heads, D = cfg.head_dim;
  OpCost cf, cb;  // from the last call of each direction
  try {
    Tensor o = make_zero(device, dtype, {B, N, H, D});
    Tensor lse = make_zero(device, DType::f32, {B, H, N});
    Tensor dq, dk, dv;
    if (need_bwd) {
      dq = make_zero(device, dtype, {B, N, H, D});
      dk = make_zero(device, dtype, {B, N, cfg.kv_heads, D});
      dv = make_zero(device, dtype, {B, N, cfg.kv_heads, D});
    }
    // With --profile each call is synchronized and recorded on its own (a few microseconds per call).
    auto fwd = [&] {
      const double t0 = prof ? prof->now_us() : 0;
      attention_forward(in.q.view, in.k.view, in.v.view, o.view, lse.view, opts, &cf);
      if (prof) device_sync(device);
      trace_call(prof, t0, impl_str + ".fwd", seqlen, cf);
    };
    auto bwd = [&] {
      const double t0 = prof ? prof->now_us() : 0;
      attention_backward(in.dout.view, in.q.view, in.k.view, in.v.view, o.view, lse.view, dq.view, dk.view, dv.view,
                         opts, &cb);
      if (prof) device_sync(device);
      trace_call(prof, t0, impl_str + ".bwd", seqlen, cb);
    };
    auto once = [&] {
      if (pass != "bwd") fwd();
      if (need_bwd) bwd();
      device_sync(device);
    };
    if (pass == "bwd") {  // the backward pass needs o and lse of a forward (not timed)
      fwd();
      device_sync(device);
    }
    for (int w = 0; w < cfg.warmup; ++w) once();
    auto timed = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      once();
      const auto t1 = std::chrono::steady_clock::now();
      row.times_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    };
    timed();
    int runs = cfg.repeats;
    if (runs == 0) {
      const double first_s = std::max(row.times_ms[0] * 1e-3, 1e-6);
      runs = int(std::clamp(std::ceil(kAdaptiveSeconds / first_s), double(kAdaptiveMin), double(kAdaptiveMax)));
    }
    while (int(row.times_ms.size()) < runs) timed();
  } catch (const Error& e) {
    if (e.status() == Status::out_of_memory) row.status = "refused";
    else if (e.status() == Status::unsupported) row.status = "unsupported";
    else throw;
    row.message = e.what();
    row.times_ms.clear();
    return row;
  }

  row.median_ms = median(row.times_ms);
  row.min_ms = *std::min_element(row.times_ms.begin(), row.times_ms.end());
  OpCost c;
  std::vector<std::string> kernels, models;
  auto add = [&](const OpCost& x) {
    c.flops += x.flops;
    c.bytes_read += x.bytes_read;
    c.bytes_written += x.bytes_written;
    c.workspace_bytes = std::max(c.workspace_bytes, x.workspace_bytes);  // fwd frees before bwd allocates
    if (std::find(kernels.begin(), kernels.end(), x.kernel) == kernels.end()) kernels.push_back(x.kernel);
    models.push_back(x.model);
  };
  if (pass != "bwd") add(cf);
  if (need_bwd) add(cb);
  row.cost = c;
  for (size_t i = 0; i < kernels.size(); ++i) row.kernel += (i ? "+" : "") + kernels[i];
  for (size_t i = 0; i < models.size(); ++i) row.model += (i ? " | " : "") + models[i];
  return row;
}

// ---- output -----------------------------------------------------------------------------------------

struct Column {
  const char* title;
  int width;
  bool left;
};
const Column kColumns[] = {{"impl", 9, true},      {"kernel", 22, true},     {"seqlen", 6, false},
                           {"pass", 7, true},      {"median ms", 9, false},  {"min ms", 9, false},
                           {"GFLOP/s", 8, false},  {"moved", 9, false},      {"extra mem", 9, false},
                           {"vs standard", 11, false}};

std::string format_cells(const std::vector<std::string>& cells) {
  std::ostringstream o;
  for (size_t i = 0; i < cells.size() && i < std::size(kColumns); ++i) {
    const Column& c = kColumns[i];
    if (i) o << "  ";
    if (c.left) o << std::left << std::setw(c.width) << cells[i];
    else o << std::right << std::setw(c.width) << cells[i];
  }
  for (size_t i = std::size(kColumns); i < cells.size(); ++i) o << "  " << cells[i];
  std::string s = o.str();
  s.erase(s.find_last_not_of(' ') + 1);
  return s;
}

std::string table_header() {
  std::vector<std::string> cells;
  for (const Column& c : kColumns) cells.push_back(c.title);
  std::string h = format_cells(cells);
  return h + "\n" + std::string(h.size(), '-');
}

std::string table_row(const Row& r) {
  if (r.status != "ok")
    return format_cells({r.impl, "-", std::to_string(r.seqlen), pass_label(r.pass)}) + "  " + r.status + ": " + r.message;
  const double gflops = r.cost.flops / (r.median_ms * 1e-3) / 1e9;
  return format_cells({r.impl, r.kernel, std::to_string(r.seqlen), pass_label(r.pass), sig3(r.median_ms), sig3(r.min_ms),
                       sig3(gflops), human_bytes(r.cost.bytes_read + r.cost.bytes_written),
                       human_bytes(r.cost.workspace_bytes), r.speedup ? fixed(*r.speedup, 2) + "x" : "-"});
}

json row_json(const Row& r) {
  json j;
  j["impl"] = r.impl;
  j["kernel"] = r.status == "ok" ? json(r.kernel) : json(nullptr);
  j["seqlen"] = r.seqlen;
  j["pass"] = r.pass;
  j["status"] = r.status;
  j["message"] = r.message;
  if (r.status == "ok") {
    j["median_ms"] = r.median_ms;
    j["min_ms"] = r.min_ms;
    j["repeats"] = r.times_ms.size();
    j["times_ms"] = r.times_ms;
    j["flops"] = r.cost.flops;
    j["gflops"] = r.cost.flops / (r.median_ms * 1e-3) / 1e9;
    j["bytes_read"] = r.cost.bytes_read;
    j["bytes_written"] = r.cost.bytes_written;
    j["workspace_bytes"] = r.cost.workspace_bytes;
    j["model"] = r.model;
    j["speedup_vs_standard"] = r.speedup ? json(*r.speedup) : json(nullptr);
  } else {
    for (const char* k : {"median_ms", "min_ms", "gflops", "flops", "bytes_read", "bytes_written", "workspace_bytes",
                          "speedup_vs_standard"})
      j[k] = nullptr;
    j["repeats"] = 0;
  }
  return j;
}

// ---- the command ------------------------------------------------------------------------------------

// The library's own message when CUDA is absent: it checks the device before touching any data.
void probe_cuda() {
  if (cuda_device_count() > 0) return;
  static float dummy[8];
  TensorView t = TensorView::contiguous(dummy, DType::f32, {1, 1, 1, 8}, Device::cuda);
  TensorView lse = TensorView::contiguous(dummy, DType::f32, {1, 1, 1}, Device::cuda);
  attention_forward(t, t, t, t, lse, AttentionOptions{});
  fail(Status::unsupported, "--device cuda: no CUDA device is visible");
}

void run_bench(BenchConfig cfg) {
  if (cfg.kv_heads == 0) cfg.kv_heads = cfg.heads;
  if (cfg.heads % cfg.kv_heads != 0)
    throw CLI::ValidationError("--kv-heads", "must divide --heads (" + std::to_string(cfg.heads) + "), got " +
                                                 std::to_string(cfg.kv_heads));
  if (cfg.threads > 0) set_num_threads(cfg.threads);
  const Device device = cfg.device == "cuda" ? Device::cuda : Device::cpu;
  if (device == Device::cuda) probe_cuda();
  DType dtype = DType::f32;
  parse_dtype(cfg.dtype, &dtype);

  // Dedupe, keep the order given; seqlens likewise.
  auto dedupe = [](auto& v) {
    auto out = v;
    out.clear();
    for (const auto& x : v)
      if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
    v = out;
  };
  dedupe(cfg.impls);
  dedupe(cfg.seqlens);
  std::vector<std::string> passes = cfg.pass == "all" ? std::vector<std::string>{"fwd", "fwdbwd"}
                                                     : std::vector<std::string>{cfg.pass};
  const bool need_bwd = std::any_of(passes.begin(), passes.end(), [](const std::string& p) { return p != "fwd"; });

  // Inputs and outputs are the bench's own memory: refuse up front what cannot fit (Linux would
  // otherwise overcommit and kill the process when the pages are touched).
  {
    const int64_t es = dtype_size(dtype);
    const int64_t nmax = *std::max_element(cfg.seqlens.begin(), cfg.seqlens.end());
    const double qo = double(cfg.batch) * double(nmax) * double(cfg.heads) * double(cfg.head_dim) * double(es);
    const double kv = double(cfg.batch) * double(nmax) * double(cfg.kv_heads) * double(cfg.head_dim) * double(es);
    const double need = need_bwd ? 4 * qo + 4 * kv : 2 * qo + 2 * kv;
    const double limit = device == Device::cpu ? double(max_workspace_bytes()) : 1e300;
    if (need > limit)
      fail(Status::out_of_memory, "--seqlen/--batch/--heads: the benchmark's inputs and outputs at seqlen " +
                                      std::to_string(nmax) + " need " + human_bytes(need) + ", more than the limit of " +
                                      human_bytes(limit) + " (80% of physical memory, or FLASHKIT_MAX_WORKSPACE_BYTES)");
  }

  // JSON destination: open before running, so a bad path fails fast.
  const bool json_stdout = cfg.json_path == "-";
  std::ofstream json_file;
  if (!cfg.json_path.empty() && !json_stdout) {
    json_file.open(cfg.json_path);
    if (!json_file) throw CLI::ValidationError("--json", "cannot open '" + cfg.json_path + "' for writing");
  }
  std::ostream& out = json_stdout ? std::cerr : std::cout;  // keep stdout pure JSON with --json -

  const std::string build = build_info();
  const std::string machine = device == Device::cpu
                                  ? cpu_model() + ", " + std::to_string(std::thread::hardware_concurrency()) +
                                        " logical cpus, " + human_bytes(double(physical_memory_bytes())) + " memory"
                                  : "cuda device 0";
  std::ostringstream shape;
  shape << "batch " << cfg.batch << ", heads " << cfg.heads << " (kv " << cfg.kv_heads << "), head_dim " << cfg.head_dim
        << ", " << cfg.dtype << ", " << (cfg.causal ? "causal" : "non-causal") << ", threads " << num_threads()
        << ", repeats " << (cfg.repeats ? std::to_string(cfg.repeats) : std::string("adaptive")) << ", warmup "
        << cfg.warmup;
  out << "# " << build << "\n# machine: " << machine << "\n# " << shape.str() << "\n"
      << "# moved: bytes read + written under each kernel's cost model; extra mem: peak workspace of the call\n"
      << table_header() << "\n"
      << std::flush;

  std::unique_ptr<analysis::Profiler> prof;
  if (!cfg.profile_path.empty())
    prof = std::make_unique<analysis::Profiler>(
        analysis::roof_of(device == Device::cpu ? analysis::local_cpu_spec() : analysis::find_device("h200"),
                          device == Device::cpu ? "f32" : "bf16"));
  std::vector<Row> rows;
  const size_t total = cfg.seqlens.size() * passes.size() * cfg.impls.size();
  size_t index = 0;
  uint64_t seed = 1;
  for (int64_t n : cfg.seqlens) {
    Inputs in;
    in.q = make_random(device, dtype, {cfg.batch, n, cfg.heads, cfg.head_dim}, seed++);
    in.k = make_random(device, dtype, {cfg.batch, n, cfg.kv_heads, cfg.head_dim}, seed++);
    in.v = make_random(device, dtype, {cfg.batch, n, cfg.kv_heads, cfg.head_dim}, seed++);
    if (need_bwd) in.dout = make_random(device, dtype, {cfg.batch, n, cfg.heads, cfg.head_dim}, seed++);
    for (const std::string& pass : passes) {
      std::vector<Row> group;
      for (const std::string& impl : cfg.impls) {
        ++index;
        if (!cfg.quiet)
          std::cerr << "[" << index << "/" << total << "] " << impl << " " << pass_label(pass) << " seqlen=" << n
                  << " ...\n"
                  << std::flush;
        group.push_back(run_row(cfg, device, dtype, n, impl, pass, in, prof.get()));
      }
      const Row* standard = nullptr;
      for (const Row& r : group)
        if (r.impl == "standard" && r.status == "ok") standard = &r;
      if (standard)
        for (Row& r : group)
          if (r.status == "ok" && &r != standard) r.speedup = standard->median_ms / r.median_ms;
      for (const Row& r : group) out << table_row(r) << "\n";
      out << std::flush;
      rows.insert(rows.end(), group.begin(), group.end());
    }
  }

  if (!cfg.json_path.empty()) {
    json j;
    j["device"] = cfg.device;
    j["machine"] = {{"description", machine},
                    {"cpu_model", cpu_model()},
                    {"logical_cpus", std::thread::hardware_concurrency()},
                    {"physical_memory_bytes", physical_memory_bytes()},
                    {"cpu_isa", cpu_isa()},
                    {"flash_onchip_bytes", flash_onchip_bytes(device)}};
    j["build"] = build;
    j["version"] = version();
    j["date"] = utc_now_iso();
    j["config"] = {{"seqlens", cfg.seqlens},   {"batch", cfg.batch},       {"heads", cfg.heads},
                   {"kv_heads", cfg.kv_heads}, {"head_dim", cfg.head_dim}, {"causal", cfg.causal},
                   {"dtype", cfg.dtype},       {"impls", cfg.impls},       {"passes", passes},
                   {"warmup", cfg.warmup},     {"threads", num_threads()}, {"device", cfg.device}};
    j["config"]["repeats"] = cfg.repeats ? json(cfg.repeats) : json("adaptive");
    j["rows"] = json::array();
    for (const Row& r : rows) j["rows"].push_back(row_json(r));
    if (json_stdout) std::cout << j.dump(2) << "\n" << std::flush;
    else {
      json_file << j.dump(2) << "\n";
      json_file.close();
      if (!json_file) fail(Status::invalid_argument, "--json: writing '" + cfg.json_path + "' failed (disk full?)");
    }
  }

  if (prof) {
    prof->write_chrome_trace(cfg.profile_path);
    std::cerr << "\n" << prof->summary_table() << "trace: " << cfg.profile_path
              << " (open in ui.perfetto.dev or chrome://tracing)\n";
  }

  // Every row unsupported (e.g. a device without kernels for this request): that is a failure, not a result.
  if (!rows.empty() && std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.status == "unsupported"; }))
    fail(Status::unsupported, rows.front().message);
}

// head_dim: a multiple of 8 in [8, 256] (what every implementation accepts).
CLI::Validator head_dim_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const long v = std::strtol(s.c_str(), &end, 10);
        if (s.empty() || end == s.c_str() || *end != 0) return "expected an integer, got '" + s + "'";
        if (v < 8 || v > 256 || v % 8 != 0) return "must be a multiple of 8 in [8, 256], got " + s;
        return {};
      },
      "multiple of 8 in [8, 256]");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmark kernels side by side");
  // At most one benchmark; none is an error of its own (so that `bench foo` reports 'foo' as unexpected).
  bench->require_subcommand(0, 1);
  bench->callback([bench] {
    if (bench->get_subcommands().empty())
      throw CLI::RequiredError("bench: a benchmark (attention, ssm, spec, serve)");
  });
  auto* attn = bench->add_subcommand(
      "attention",
      "Time reference/standard/flash attention side by side: median and min time, GFLOP/s, modelled bytes moved, "
      "peak extra memory, speedup over standard");
  auto cfg = std::make_shared<BenchConfig>();
  attn->add_option("--seqlen", cfg->seqlens, "Sequence lengths (comma list)")
      ->delimiter(',')
      ->check(int_range(1, limits::kMaxBenchSeqlen))
      ->capture_default_str();
  attn->add_option("--batch", cfg->batch, "Batch size")->check(int_range(1, int64_t(1) << 20))->capture_default_str();
  attn->add_option("--heads", cfg->heads, "Query heads")->check(int_range(1, 4096))->capture_default_str();
  attn->add_option("--kv-heads", cfg->kv_heads, "Key/value heads, dividing --heads (default: --heads)")
      ->check(int_range(1, 4096));
  attn->add_option("--head-dim", cfg->head_dim, "Head dimension")->check(head_dim_check())->capture_default_str();
  attn->add_flag("--causal", cfg->causal, "Causal mask");
  attn->add_option("--dtype", cfg->dtype, "Element type")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  attn->add_option("--impl", cfg->impls, "Implementations (comma list of reference, standard, flash)")
      ->delimiter(',')
      ->check(CLI::IsMember({"reference", "standard", "flash"}))
      ->capture_default_str();
  attn->add_option("--pass", cfg->pass, "fwd, bwd, fwdbwd (forward+backward) or all (fwd and fwdbwd rows)")
      ->check(CLI::IsMember({"fwd", "bwd", "fwdbwd", "all"}))
      ->capture_default_str();
  attn->add_option("--warmup", cfg->warmup, "Untimed runs per row")->check(int_range(0, 1000))->capture_default_str();
  attn->add_option("--repeats", cfg->repeats,
                   "Timed runs per row (default: adaptive, at least 3 and about 1 s per row, at most 20)")
      ->check(int_range(1, 100000));
  attn->add_option("-t,--threads", cfg->threads, "CPU threads (default: the library's)")->check(thread_count(false));
  add_json_option(attn, &cfg->json_path, "the results");
  attn->add_option("--profile", cfg->profile_path,
                   "Write a Chrome/Perfetto trace of every timed call (time, FLOPs, bytes, % of the roof) to PATH");
  attn->add_flag("-q,--quiet", cfg->quiet, "No progress line per row on stderr");
  attn->add_option("--device", cfg->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  attn->callback([cfg] { run_bench(*cfg); });
}

}  // namespace flashkit::cli
