// Limits on what flashkit reads from files and arguments: policy in one place, each value with the reason for it.
// Sections are owned by different parts of the code; add to (or create) the section of yours.
#pragma once
#include <cstdint>

namespace flashkit::limits {

// ------------------------------------------------------------------------------------------- front ends
// (CLI apps/flashkit, C API src/capi, Python python/flashkit, the runtime's thread count): what one request may ask
// for before it is refused with a clear error, instead of allocating without end, looping for hours or crashing
// inside a runtime. Memory is also checked against max_workspace_bytes() (80% of RAM) before allocating.

// Thread counts: at most kThreadsPerHardwareThread x the machine's hardware threads and never more than
// kMaxThreads (OpenMP runtimes crash when asked for tens of thousands). flashkit::max_threads() applies it and
// check_threads() enforces it everywhere: CLI --threads, LoadOptions::threads, fk_model_load, Model(threads=),
// set_num_threads, AttentionOptions::threads.
inline constexpr int kMaxThreads = 1024;
inline constexpr int kThreadsPerHardwareThread = 4;

// Bytes of text read from a file, standard input or an API string in one go (prompts, tokenize -f, chat lines,
// Tokenizer.encode): 64 MiB, ~16M tokens, far beyond any context.
inline constexpr int64_t kMaxTextBytes = int64_t(64) << 20;

// Tokens one generate call may ask for (generate -n, fk_generate's int, Model.generate): the context bounds what
// is produced, and nothing is reserved up front by this number.
inline constexpr int64_t kMaxNewTokens = int64_t(2147483647);

// KV-cache rows per sequence (--ctx, LoadOptions::max_context): the buffer size products stay far from overflow.
inline constexpr int64_t kMaxContext = int64_t(1) << 24;

// Prompt tokens per forward pass (--prefill-chunk): activations are [chunk, intermediate].
inline constexpr int64_t kMaxPrefillChunk = int64_t(1) << 16;

// Shapes of the analysis and benchmark commands (bench, profile, cost): sequence length, batch, heads, layers.
inline constexpr int64_t kMaxBenchSeqlen = int64_t(1) << 22;
inline constexpr int64_t kMaxBenchBatch = int64_t(1) << 20;
inline constexpr int64_t kMaxBenchHeads = 4096;
inline constexpr int64_t kMaxBenchLayers = 4096;
// Elements of the profile gelu arrays (2^31: 8 GiB of f32) and repetitions of any timed loop.
inline constexpr int64_t kMaxBenchElements = int64_t(1) << 31;
inline constexpr int64_t kMaxBenchReps = 100000;
// Time budget of one measurement (roofline --seconds), seconds.
inline constexpr double kMaxBenchSeconds = 3600;
// Triad arrays (MB each) and GEMM sizes of roofline --measure / roofline gemm.
inline constexpr double kMaxTriadMb = 65536;
inline constexpr int64_t kMaxGemmSize = int64_t(1) << 16;

}  // namespace flashkit::limits
