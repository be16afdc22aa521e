// The one place flashkit reads its environment: the FLASHKIT_* parsers (core/env.hpp) and tuning_from_env(),
// which every front end calls once; library code receives the resulting Tuning.
#include "core/tuning.hpp"

#include "core/env.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <utility>

namespace flashkit::env {

std::optional<std::string> get(const char* name) {
  const char* s = std::getenv(name);
  if (!s || !*s) return std::nullopt;
  return std::string(s);
}

void warn_ignored(const char* name, const std::string& value, const char* expected) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (!warned.insert(std::string(name) + "=" + value).second) return;
  std::fprintf(stderr, "flashkit: ignoring %s=%s (expected %s)\n", name, value.c_str(), expected);
}

bool flag(const char* name, bool dflt) {
  const auto v = get(name);
  if (!v) return dflt;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (s == "1" || s == "on" || s == "true" || s == "yes") return true;
  if (s == "0" || s == "off" || s == "false" || s == "no") return false;
  warn_ignored(name, *v, "0 or 1");
  return dflt;
}

int64_t integer(const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  const auto v = get(name);
  if (!v) return dflt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || !end || *end != 0 || x < lo || x > hi) {
    const std::string want = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    warn_ignored(name, *v, want.c_str());
    return dflt;
  }
  return x;
}

double positive(const char* name, double dflt) {
  const auto v = get(name);
  if (!v) return dflt;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (!end || *end != 0 || !(x > 0)) {
    warn_ignored(name, *v, "a positive number");
    return dflt;
  }
  return x;
}

int choice(const char* name, std::initializer_list<const char*> choices, int dflt) {
  const auto v = get(name);
  if (!v) return dflt;
  int i = 0;
  std::string want = "one of";
  for (const char* c : choices) {
    if (*v == c) return i;
    want += std::string(i ? ", " : " ") + c;
    ++i;
  }
  warn_ignored(name, *v, want.c_str());
  return dflt;
}

}  // namespace flashkit::env

namespace flashkit {

Tuning tuning_from_env() {
  Tuning t;
  t.cpu_isa = CpuIsaCap(env::choice("FLASHKIT_CPU_ISA", {"scalar", "avx2", "avx512"}, int(t.cpu_isa)));
  t.num_threads = int(env::integer("FLASHKIT_NUM_THREADS", 0, 1, 4096));
  t.max_workspace_bytes = env::integer("FLASHKIT_MAX_WORKSPACE_BYTES", 0, 1, INT64_MAX);
  t.cpu_wait = CpuWait(env::choice("FLASHKIT_CPU_WAIT", {"passive", "active"}, int(t.cpu_wait)));
  const auto omp_wait = env::get("OMP_WAIT_POLICY");
  t.omp_wait_set = omp_wait.has_value() || env::get("GOMP_SPINCOUNT").has_value();
  t.omp_wait_passive = omp_wait && (*omp_wait == "passive" || *omp_wait == "PASSIVE");

  t.sm90 = env::flag("FLASHKIT_SM90", t.sm90);
  t.sm90_fwd_config = int(env::integer("FLASHKIT_SM90_CFG", 0, 0, 3));
  t.sm90_ws_pingpong = env::flag("FLASHKIT_SM90_WS_PINGPONG", t.sm90_ws_pingpong);
  static constexpr int kWsBn[] = {0, 128, 176, 192};
  t.sm90_ws_bn = kWsBn[env::choice("FLASHKIT_SM90_WS_BN", {"auto", "128", "176", "192"}, 0)];
  t.sm90_ws_persist = int(env::integer("FLASHKIT_SM90_WS_PERSIST", -1, -1, 1 << 20));
  t.sm90_bwd_config = int(env::integer("FLASHKIT_SM90_BWD_CFG", 0, 0, 1));
  static constexpr int kWsOverlap[] = {-1, 0, 1, 2, 0, 1};  // auto|0|1|2|off|on
  t.sm90_ws_overlap = kWsOverlap[env::choice("FLASHKIT_SM90_WS_OVERLAP", {"auto", "0", "1", "2", "off", "on"}, 0)];
  static constexpr int kWsDense[] = {-1, 0, 1, 0, 1};  // auto|0|1|off|on
  t.sm90_ws_dense = kWsDense[env::choice("FLASHKIT_SM90_WS_DENSE", {"auto", "0", "1", "off", "on"}, 0)];
  static constexpr int kBwdWs[] = {-1, 0, 1, 0, 1};  // auto|0|1|off|on
  t.sm90_bwd_ws = kBwdWs[env::choice("FLASHKIT_SM90_BWD_WS", {"auto", "0", "1", "off", "on"}, 0)];
  // fp8 forward O rescale (worklog attention-fp8-cuda v4)
  t.fp8_rescale = env::choice("FLASHKIT_FP8_RESCALE", {"auto", "0", "1", "2"}, 0) - 1;  // auto: -1
  static constexpr int kFp8KeyTile[] = {0, 128, 192};
  t.fp8_key_tile = kFp8KeyTile[env::choice("FLASHKIT_FP8_KEY_TILE", {"auto", "128", "192"}, 0)];
  t.decode_max_splits = int(env::integer("FLASHKIT_DECODE_MAX_SPLITS", 0, 1, 512));
  t.decode_combine = DecodeCombine(env::choice("FLASHKIT_DECODE_COMBINE", {"auto", "kernel", "cluster", "last"}, 0));
  t.decode_pdl = env::flag("FLASHKIT_DECODE_PDL", t.decode_pdl);
  static constexpr int kDecodeNarrow[] = {-1, 0, 1, 0, 1};  // auto|0|1|off|on
  t.decode_narrow = kDecodeNarrow[env::choice("FLASHKIT_DECODE_NARROW", {"auto", "0", "1", "off", "on"}, 0)];
  t.decode_prefetch = env::flag("FLASHKIT_DECODE_PREFETCH", t.decode_prefetch);

  t.cuda_graphs = env::flag("FLASHKIT_CUDA_GRAPHS", t.cuda_graphs);
  t.cuda_fuse = env::flag("FLASHKIT_CUDA_FUSE", t.cuda_fuse);
  t.cuda_pingpong = env::flag("FLASHKIT_CUDA_PINGPONG", t.cuda_pingpong);
  t.cuda_pdl = env::flag("FLASHKIT_CUDA_PDL", t.cuda_pdl);
  t.gemv_prefetch = env::flag("FLASHKIT_CUDA_PREFETCH", t.gemv_prefetch);
  t.gemv_streaming_loads = env::flag("FLASHKIT_CUDA_LDCS", t.gemv_streaming_loads);
  if (!env::flag("FLASHKIT_CUDA_ATTN_CLUSTER", true)) t.engine_decode_merge = EngineDecodeMerge::global;
  t.device_argmax = env::flag("FLASHKIT_DEVICE_ARGMAX", t.device_argmax);
  t.paged_flash_chunks = env::flag("FLASHKIT_PAGED_FLASH", t.paged_flash_chunks);
  static constexpr int kMambaWidths[] = {0, 64, 32, 16, 8};
  t.cuda_mamba_channels =
      kMambaWidths[env::choice("FLASHKIT_CUDA_MAMBA_CHANNELS", {"auto", "64", "32", "16", "8"}, 0)];
  t.cuda_gemv_plan = int(env::choice("FLASHKIT_CUDA_GEMV_PLAN", {"auto", "legacy", "balanced"}, 0));
  t.spec_exact = env::flag("FLASHKIT_SPEC_EXACT", t.spec_exact);
  t.train_inject_nan_step = env::integer("FLASHKIT_TRAIN_INJECT_NAN_STEP", -1, 0, INT64_MAX);

  t.cpu_peak_gflops = env::positive("FLASHKIT_CPU_PEAK_GFLOPS", 0);
  t.cpu_bw_gbs = env::positive("FLASHKIT_CPU_BW_GBS", 0);
  return t;
}

namespace {
std::mutex g_default_mu;
bool g_default_set = false;
Tuning g_default;
}  // namespace

Tuning default_tuning() {
  std::lock_guard<std::mutex> lock(g_default_mu);
  if (!g_default_set) {
    g_default = tuning_from_env();
    g_default_set = true;
  }
  return g_default;
}

void set_default_tuning(const Tuning& t) {
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default = t;
  g_default_set = true;
}

}  // namespace flashkit
