#include "cli_checks.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/limits.hpp"
#include "engine/offload_plan.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace flashkit::cli {

namespace {
thread_local const char* t_activity = nullptr;

std::string range_text(int64_t lo, int64_t hi) { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; }

std::string num_text(double x) {
  char b[64];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}
}  // namespace

namespace {
// "" when s is an integer in [lo, hi]; else why not (r: the range as text).
std::string check_int(const std::string& s, int64_t lo, int64_t hi, const std::string& r) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end == s.c_str() || *end != 0 || errno == ERANGE)
    return "expected an integer in " + r + ", got '" + s + "'";
  if (v < lo || v > hi) return "must be in " + r + ", got " + s;
  return {};
}
}  // namespace

CLI::Validator int_range(int64_t lo, int64_t hi) {
  const std::string r = range_text(lo, hi);
  return CLI::Validator([lo, hi, r](std::string& s) { return check_int(s, lo, hi, r); }, "INT in " + r);
}

CLI::Validator int_range_or(int64_t lo, int64_t hi, const std::string& word) {
  const std::string r = range_text(lo, hi) + " or " + word;
  return CLI::Validator(
      [lo, hi, r, word](std::string& s) -> std::string { return s == word ? std::string() : check_int(s, lo, hi, r); },
      "INT in " + r);
}

CLI::Validator real_range(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string r = (lo_open ? "(" : "[") + num_text(lo) + ", " + num_text(hi) + (hi_open ? ")" : "]");
  return CLI::Validator(
      [lo, hi, lo_open, hi_open, r](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end == s.c_str() || *end != 0 || !std::isfinite(v) || errno == ERANGE)
          return "expected a finite number in " + r + ", got '" + s + "'";
        if (v < lo || v > hi || (lo_open && v == lo) || (hi_open && v == hi)) return "must be in " + r + ", got " + s;
        return {};
      },
      "NUMBER in " + r);
}

CLI::Validator uint64_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
        std::strtoull(s.c_str(), &end, 10);
        if (!digits || *end != 0 || errno == ERANGE)
          return "expected an integer in [0, 18446744073709551615], got '" + s + "'";
        return {};
      },
      "UINT64");
}

CLI::Validator thread_count(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& s) -> std::string {
        const int64_t hi = max_threads();
        const std::string r = (allow_zero ? "0 (the default) or " : std::string()) + "1.." + std::to_string(hi);
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || end == s.c_str() || *end != 0 || errno == ERANGE)
          return "expected a thread count, " + r + ", got '" + s + "'";
        if ((v == 0 && allow_zero) || (v >= 1 && v <= hi)) return {};
        return "must be " + r + " (at most " + std::to_string(limits::kThreadsPerHardwareThread) +
               " x this machine's hardware threads, and " + std::to_string(limits::kMaxThreads) + "), got " + s;
      },
      "THREADS");
}

Activity::Activity(const char* what) : prev_(t_activity) { t_activity = what; }
Activity::~Activity() { t_activity = prev_; }
const char* Activity::current() { return t_activity; }

void check_memory(double bytes, const std::string& what) {
  const double limit = double(max_workspace_bytes());
  if (bytes <= limit) return;
  char b[256];
  std::snprintf(b, sizeof b, " needs %.3g GB, more than the limit of %.3g GB (80%% of physical memory, or "
                "FLASHKIT_MAX_WORKSPACE_BYTES)", bytes / 1e9, limit / 1e9);
  fail(Status::out_of_memory, what + b);
}

std::string read_text_file(const std::string& path, const std::string& option) {
  const Activity act("reading the input text");
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) fail(Status::invalid_argument, option + ": cannot read " + path + ": " + std::strerror(errno));
    in = &file;
  }
  std::string text;
  char buf[1 << 16];
  while (*in) {
    in->read(buf, sizeof buf);
    const std::streamsize got = in->gcount();
    if (int64_t(text.size()) + got > limits::kMaxTextBytes)
      fail(Status::invalid_argument, option + ": " + (path == "-" ? std::string("standard input") : path) +
                                         " holds more than " + std::to_string(limits::kMaxTextBytes >> 20) +
                                         " MiB of text (flashkit's limit for one input)");
    text.append(buf, size_t(got));
  }
  if (in->bad()) fail(Status::invalid_argument, option + ": reading " + path + " failed");
  return text;
}

void check_written(std::ostream& out, const std::string& what) {
  out.flush();
  if (!out) fail(Status::invalid_argument, "writing " + what + " failed" + (errno ? std::string(": ") + std::strerror(errno) : ""));
}

std::string tokenizer_dir(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (!fs::is_regular_file(p, ec)) return path;  // a directory, or a missing path the loader reports
  if (p.filename() != "tokenizer.json")
    fail(Status::invalid_argument, option + ": " + path +
                                       " is a file but not tokenizer.json (expected a directory holding "
                                       "tokenizer.json, or the path of a tokenizer.json file)");
  const fs::path dir = p.parent_path();
  return dir.empty() ? std::string(".") : dir.string();
}

CLI::Option* add_json_option(CLI::App* app, std::string* path, const std::string& what) {
  return app
      ->add_option("--json", *path,
                   "Write " + what + " as one JSON document to standard output (--json; the text report then goes to "
                   "stderr) or to FILE (--json FILE)")
      ->expected(0, 1)
      ->default_str("-");
}

TextToStderr::TextToStderr(bool active) {
  if (active) saved_ = std::cout.rdbuf(std::cerr.rdbuf());
}

TextToStderr::~TextToStderr() {
  if (saved_) std::cout.rdbuf(saved_);
}

void write_json_stdout(const std::string& text) {
  std::cout.flush();
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    fail(Status::invalid_argument, std::string("writing the JSON to standard output failed: ") + std::strerror(errno));
}

void add_offload_options(CLI::App* app, OffloadArgs* a) {
  app->add_option("--offload-layers", a->layers,
                  "CUDA: keep the last N decoder layers' weights in pinned host memory, streamed to the GPU each "
                  "forward pass (0 = none)")
      ->check(int_range(0, int64_t(1) << 20))->capture_default_str();
  app->add_option("--gpu-memory", a->gpu_memory,
                  "CUDA: device memory budget (24G, 512M, bytes); offloads the fewest last layers that make the "
                  "weights, one sequence's KV cache and workspace fit")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            const int64_t b = engine::parse_byte_count(s);
            return b <= 0 ? "expected a positive byte count (e.g. 24G, 512M, 1073741824), got '" + s + "'"
                          : std::string();
          },
          "BYTES"));
}

void apply_offload_options(const OffloadArgs& a, LoadOptions& o) {
  o.offload_layers = a.layers;
  o.gpu_memory_bytes = a.gpu_memory.empty() ? 0 : engine::parse_byte_count(a.gpu_memory);
}

std::string offload_summary(const ModelInfo& mi) {
  if (mi.offloaded_layers <= 0) return {};
  char b[160];
  std::snprintf(b, sizeof b, "offload: %lld of %lld layers streamed from %.2f GiB of pinned host memory",
                (long long)mi.offloaded_layers, (long long)mi.num_layers, double(mi.host_pinned_bytes) / double(1 << 30));
  return b;
}

}  // namespace flashkit::cli
