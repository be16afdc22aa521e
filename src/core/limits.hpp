// Limits on what flashkit reads from files and arguments: policy in one place, each value with the reason for it.
// Readers check against these before allocating or recursing, and name the limit in their error message.
// Sections are owned by different parts of the code; add to (or create) the section of yours.
#pragma once
#include <cstdint>

namespace flashkit::limits {

// ------------------------------------------------------------------------------------------- file readers
// (checkpoint readers, tokenizer, config.json: src/core/json_io, src/model, src/tokenizer, src/engine/config)

// JSON nesting depth (objects + arrays open at once) of any JSON file flashkit reads. Real files nest at most
// ~6 deep (tokenizer.json Sequence normalizers, rope_parameters per layer type); the depth bounds the recursion of
// the code that walks the tree (copies, Sequence parsers) so a hostile file cannot overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

// Bytes of a safetensors header: the format's own limit (the reference implementation refuses longer headers).
// Index files (model.safetensors.index.json) get the same bound.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// GGUF metadata arrays: nesting (real files nest at most 2) and entries per array (64M: far above any
// vocabulary; bounds the memory of the JSON the metadata becomes).
inline constexpr int kMaxGgufArrayDepth = 8;
inline constexpr uint64_t kMaxGgufArrayLength = 1ull << 26;

// Bytes of a small JSON file read whole into memory: config.json, tokenizer_config.json (chat templates are a
// few tens of KB), generation_config.json. Real ones are under 100 KB.
inline constexpr uint64_t kMaxConfigFileBytes = 16ull << 20;

// Bytes of tokenizer.json read into memory (Gemma 3's is 33 MB, the largest known ones ~60 MB).
inline constexpr uint64_t kMaxTokenizerFileBytes = 512ull << 20;

// Model dimensions accepted from config.json (and GGUF metadata). Each is ~8-30x the largest released model's
// value, far from anything real but small enough that every weight-size product fits in 64 bits
// (vocab x hidden <= 2^41 elements, layers x per-layer weights < 2^50 elements).
inline constexpr int64_t kMaxVocab = int64_t(1) << 24;          // 16.8M ids (Gemma 3: 262k)
inline constexpr int64_t kMaxHiddenSize = int64_t(1) << 17;     // 131072 (Llama 3.1 405B: 16384)
inline constexpr int64_t kMaxIntermediateSize = int64_t(1) << 20;  // 1M (Llama 3.1 405B: 53248)
inline constexpr int64_t kMaxLayers = 1024;                     // (Llama 3.1 405B: 126)
inline constexpr int64_t kMaxHeads = 1024;                      // attention heads (405B: 128)
inline constexpr int64_t kMaxHeadDim = 1024;                    // (largest in use: 256)
inline constexpr int64_t kMaxPositions = int64_t(1) << 31;      // max_position_embeddings (real: up to ~10M)
inline constexpr int64_t kMaxSlidingWindow = int64_t(1) << 24;  // the engine's per-sequence KV row limit

// Floating-point fields of config.json, as closed ranges [min, max]: values outside are typos or hostile (a
// denormal factor or eps turns into inf/NaN in the forward pass). Real values are noted.
inline constexpr double kMinRmsNormEps = 1e-12, kMaxRmsNormEps = 0.1;    // 1e-5, 1e-6
inline constexpr double kMinRopeTheta = 1.0, kMaxRopeTheta = 1e12;       // 1e4 .. 1e7
inline constexpr double kMinRopeFactor = 1.0, kMaxRopeFactor = 1e4;      // 8, 32 (transformers warns below 1)
inline constexpr double kMinRopeFreqFactor = 1e-3, kMaxRopeFreqFactor = 1e4;  // llama3 low 1, high 4
inline constexpr double kMinSoftcap = 0.1, kMaxSoftcap = 1e6;           // Gemma 2: 30, 50 (0 means off)
inline constexpr double kMinQueryPreAttnScalar = 1.0, kMaxQueryPreAttnScalar = 1e6;  // 256, hidden/heads
inline constexpr double kMinAttentionFactor = 1e-3, kMaxAttentionFactor = 1e3;

// ------------------------------------------------------------------------------------------- tokenizer

// Pre-tokens longer than this many bytes are cut at positions no merge can cross before BPE (see
// tok::BpeModel::encode): exact, and it keeps a text with no pre-tokenizer split from becoming one huge word.
inline constexpr uint64_t kBpeSplitBytes = 64;

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

// Speculative decoding (generate --draft-tokens / --max-draft-tokens / --lookup / --spec-tree, bench spec --k /
// --lookup / --tree-width): tokens proposed per step, n-gram length and tree width. src/spec checks the same bound.
inline constexpr int64_t kMaxSpecTokens = 64;

// Serving (flashkit serve, bench serve). The engine's own ranges (src/serve/engine.cpp checks the same values):
// positions per KV block, tokens per batched step, sequences decoding together.
inline constexpr int64_t kMaxServeBlockSize = 1024;
inline constexpr int64_t kMaxServeStepTokens = 65536;
inline constexpr int64_t kMaxServeRunning = 4096;
// The HTTP front end: connections (one thread each), requests queued or running, bytes of one request body (a
// prompt of kMaxTextBytes of JSON-escaped text fits).
inline constexpr int64_t kMaxServeConnections = 4096;
inline constexpr int64_t kMaxServePending = int64_t(1) << 20;
inline constexpr int64_t kMaxServeBodyBytes = int64_t(1) << 30;
// bench serve: requests per run, concurrent clients, tokens generated per request.
inline constexpr int64_t kMaxBenchServeRequests = 10000;
inline constexpr int64_t kMaxBenchServeConcurrency = 256;
inline constexpr int64_t kMaxBenchServeTokens = 4096;

// Training front ends (train, train-tokenizer, prepare-data): optimizer steps (the recipe's own bound), BPE
// vocabulary (the tokenizer's id space), synthetic examples per split (their tokens are also checked against memory).
inline constexpr int64_t kMaxTrainSteps = int64_t(1) << 40;
inline constexpr int64_t kMaxBpeVocab = int64_t(1) << 24;
inline constexpr int64_t kMaxSyntheticExamples = int64_t(1) << 32;

}  // namespace flashkit::limits
