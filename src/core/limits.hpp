// Policy limits, in one place: what a request may ask for before flashkit refuses it with a clear error (instead of
// allocating without end, looping for hours or crashing inside a runtime). Each section belongs to its users.
#pragma once
#include <cstdint>

namespace flashkit::limits {

// ---- Front ends (CLI, C API, Python) and the runtime ---------------------------------------------------------------
// Thread counts: at most kThreadsPerHardwareThread x the machine's hardware threads and never more than kMaxThreads
// (OpenMP runtimes crash when asked for tens of thousands); flashkit::max_threads() applies it, check_threads()
// enforces it everywhere (CLI --threads, LoadOptions::threads, fk_model_load, Model(threads=), set_num_threads,
// AttentionOptions::threads).
constexpr int kMaxThreads = 1024;
constexpr int kThreadsPerHardwareThread = 4;
// Text read from a file, standard input or an API string (prompts, tokenize -f, chat lines): 64 MiB.
constexpr int64_t kMaxTextBytes = int64_t(64) << 20;
// Tokens one generate call may ask for (generate -n, fk_generate, Model.generate); the context bounds what is
// actually produced, and nothing is reserved up front by this number.
constexpr int64_t kMaxNewTokens = int64_t(2147483647);  // the C API's int
// KV cache rows per sequence (--ctx, LoadOptions::max_context); memory is checked against the machine as well.
constexpr int64_t kMaxContext = int64_t(1) << 24;
// Prompt tokens per forward pass (--prefill-chunk).
constexpr int64_t kMaxPrefillChunk = int64_t(1) << 16;
// Sequence lengths of the profile/cost/bench commands (they allocate per token; memory is checked too).
constexpr int64_t kMaxSeqlen = int64_t(1) << 22;
// Batch, heads and layer counts of analysis commands.
constexpr int64_t kMaxBatch = int64_t(1) << 20;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxLayers = 4096;
// Elements of the profile gelu arrays (2^31: 8 GiB of f32) and repetitions of any timed loop.
constexpr int64_t kMaxElements = int64_t(1) << 31;
constexpr int64_t kMaxReps = 100000;
// Time budgets of measurements (roofline --seconds, ...), seconds.
constexpr double kMaxSeconds = 3600;
// Array sizes of the triad / GEMM measurements.
constexpr double kMaxTriadMb = 65536;
constexpr int64_t kMaxGemmSize = int64_t(1) << 16;

}  // namespace flashkit::limits
