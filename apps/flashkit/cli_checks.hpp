// Strict checks for the CLI's numeric options (every one has a range: no NaN, no overflow, no negative where it
// means nothing, no silent default) and the boundary that turns failures into one line on stderr + exit status 2.
// The limits themselves live in src/core/limits.hpp.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "flashkit/engine.hpp"

namespace flashkit::cli {

// An integer in [lo, hi], written as one (no "1e9", no "12abc", no value beyond int64). CLI11 prefixes the option.
CLI::Validator int_range(int64_t lo, int64_t hi);
// A finite real number in [lo, hi] ((lo, hi] with lo_open, [lo, hi) with hi_open).
CLI::Validator real_range(double lo, double hi, bool lo_open = false, bool hi_open = false);
// An integer in [lo, hi] or the one word `word` (e.g. --draft-tokens 4 | auto).
CLI::Validator int_range_or(int64_t lo, int64_t hi, const std::string& word);
// An unsigned 64-bit integer (seeds): digits only.
CLI::Validator uint64_value();
// CPU threads: 0 (the default) or 1..flashkit::max_threads().
CLI::Validator thread_count(bool allow_zero = true);

// What the command is doing, for "out of memory while ..." messages (main.cpp reports it).
class Activity {
 public:
  explicit Activity(const char* what);
  ~Activity();
  Activity(const Activity&) = delete;
  Activity& operator=(const Activity&) = delete;
  static const char* current();

 private:
  const char* prev_;
};

// Refuses up front what a command would allocate beyond the memory limit (80% of physical memory, or
// FLASHKIT_MAX_WORKSPACE_BYTES): Status::out_of_memory naming `what` and the sizes.
void check_memory(double bytes, const std::string& what);

// Reads a whole file ("-": standard input) of at most limits::kMaxTextBytes; `option` names the flag in errors.
std::string read_text_file(const std::string& path, const std::string& option);

// The directory to load a tokenizer from: `path` itself, or the folder of `path` when it names a tokenizer.json file
// (a tokenizer is a tokenizer.json plus the optional tokenizer_config.json next to it). `option` names the flag.
std::string tokenizer_dir(const std::string& path, const std::string& option);

// --json [FILE]: one JSON document to standard output (--json, or --json -) or to FILE. `what` names the content.
CLI::Option* add_json_option(CLI::App* app, std::string* path, const std::string& what);

// While alive and `active` (--json to standard output), text written to std::cout goes to stderr, so that standard
// output holds the JSON document only. write_json_stdout() writes past it.
class TextToStderr {
 public:
  explicit TextToStderr(bool active);
  ~TextToStderr();
  TextToStderr(const TextToStderr&) = delete;
  TextToStderr& operator=(const TextToStderr&) = delete;

 private:
  std::streambuf* saved_ = nullptr;
};
// Writes `text` to the process's standard output (C stdio: not redirected by TextToStderr); fails when it cannot.
void write_json_stdout(const std::string& text);

// Fails (naming `what`) when a stream is in a failed state after flushing it (full disk, closed descriptor).
void check_written(std::ostream& out, const std::string& what);

// CPU offload of weights (CUDA; docs/serving.md "CPU offload"): --offload-layers N | --gpu-memory BYTES, shared by
// generate, chat and serve. The model checks what needs the model (N above its layers, a budget even full offload
// exceeds, the CPU device) and names the option.
struct OffloadArgs {
  int64_t layers = 0;
  std::string gpu_memory;  // "" or a byte count: 24G, 512M, 1073741824
};
void add_offload_options(CLI::App* app, OffloadArgs* a);
void apply_offload_options(const OffloadArgs& a, LoadOptions& o);
// "offload: 4 of 16 layers streamed from 1.2 GiB of pinned host memory" (empty when nothing is offloaded).
std::string offload_summary(const ModelInfo& mi);

}  // namespace flashkit::cli
