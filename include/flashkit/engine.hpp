// The model engine: load a Hugging Face model directory (config.json + safetensors) and run it.
//
//   auto model = flashkit::Model::load("path/to/gemma-3-270m", {.device = "cpu", .dtype = "bf16"});
//   auto session = model->new_session();
//   session->prefill(prompt_ids);                 // logits of the last prompt token
//   int32_t next = argmax(session->logits());
//   session->decode(next);                        // one step: logits of the next position
//   ...or the whole loop: flashkit::generate(*session, prompt_ids, opts, on_token) -> GenerationResult
//
// `dir` is a model directory (config.json + model.safetensors or shards), a config.json with random_weights, or a
// .gguf file (config from its metadata; f32/f16/bf16 tensors are converted at load; block-quantized matrices (Q8_0,
// Q4_0, Q4_K, Q5_K, Q6_K) stay as their blocks with dtype auto (or q8_0 for a Q8_0 file) on the CPU and on CUDA).
// Architectures: gemma3_text (Gemma 3), llama (Llama 3.x incl. llama3 rope scaling), qwen2, qwen3. Config files
// written by transformers 4 (rope_theta / rope_scaling / rope_local_base_freq / sliding_window_pattern) and 5
// (rope_parameters, layer_types) are both read. Weights are memory-mapped; matrices are stored as f32 or bf16 on
// the CPU (dtype "auto" keeps bf16 checkpoints in bf16 and everything else in f32); compute is f32. The CUDA
// backend stores matrices in bf16; for bf16 weights its KV cache and the intermediates of prefill chunks are bf16
// too (ModelInfo::kv_dtype / activation_dtype), decode steps and the residual stream stay f32.
// Errors (missing files or tensors, unknown model_type / dtype, a prompt longer than the context) are
// flashkit::Error with a message that names the file, tensor or limit.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flashkit/tuning.hpp"

namespace flashkit {

struct LoadOptions {
  std::string device = "cpu";   // "cpu" or "cuda" / "cuda:N"
  std::string dtype = "auto";   // weight storage: auto | f32 | bf16 | f16 | q8_0 (CPU, Q8_0 GGUFs)
  int threads = 0;              // CPU threads (0: flashkit::num_threads())
  int64_t max_context = 0;      // KV capacity per session (0: min(max_position_embeddings, 4096))
  int64_t prefill_chunk = 512;  // prompt tokens per forward pass
  bool profile = false;         // time every op kind (adds a device sync per op)
  // Scan every weight for NaN / +-inf at load and refuse the model naming the tensor (about one extra read of the
  // weights; off skips it for speed when the checkpoint is trusted).
  bool check_weights = true;
  // Test / benchmark hook: ignore the safetensors files and fill every weight with seeded random values
  // (the directory, or a config.json path, only provides the config).
  bool random_weights = false;
  uint64_t random_seed = 1;
  // Kernel paths and switches of the backend (CUDA graphs, fusion, PDL, ...; the CPU ISA cap) and of generate()
  // on this model; unset: the process default (default_tuning()) at load time.
  std::optional<Tuning> tuning;
  // Sliding-window layers keep this many rows beyond their window in their KV ring, so that a speculative step of up
  // to kv_ring_slack + 1 rows can be rolled back without needing a row the ring overwrote (docs/speculative.md).
  // Every session of every model gets it (a run without speculation computes exactly what a run with it does).
  int64_t kv_ring_slack = 16;
  // CPU offload (CUDA only; docs/serving.md "CPU offload"): the last `offload_layers` decoder layers keep their
  // matrices in pinned host memory and are streamed to the GPU layer by layer every forward pass, overlapped with
  // compute. gpu_memory_bytes > 0 instead picks the fewest offloaded layers whose device bytes (weights, one
  // session's KV cache, workspace) fit that budget. 0 / 0: everything on the device. Giving both is an error.
  int64_t offload_layers = 0;
  int64_t gpu_memory_bytes = 0;
  // Tensor parallelism (docs/distributed.md, "Tensor-parallel inference"): ranks that each hold 1/tp of the attention heads and MLP columns
  // and all-reduce the o_proj / down_proj outputs. 1: off. > 1: tp ranks as threads of this process (the "threads"
  // communicator; on CUDA every rank uses device_index). num_attention_heads, num_key_value_heads (or tp divisible by
  // it: kv heads are then replicated) and intermediate_size must divide by tp. One process per GPU over NCCL is the
  // CLI's (flashkit generate / chat / serve --tp N; engine/tp.hpp: make_tp_leader, follow_tp_leader).
  int tp = 1;
};

struct ModelInfo {
  std::string architecture;     // gemma3_text, llama, qwen2, qwen3
  std::string source;           // directory
  std::string backend;          // e.g. "cpu.avx2 (2 threads)"
  std::string weight_dtype;     // storage of the matrices on the backend: f32 / bf16
  std::string activation_dtype; // intermediates of multi-row (prefill) steps on the backend: f32 / bf16
  std::string kv_dtype;         // KV cache on the backend: f32 / bf16
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t max_context = 0;
  int64_t parameters = 0;
  // The CUDA backend's memory report (0 on the CPU): device bytes of the weights as stored (bf16 matrices, or a
  // GGUF's quantized blocks as they are, plus f32 vectors and biases) and of the bf16 scratch that quantized matrices
  // are dequantized into for prefill (allocated at load).
  int64_t device_weight_bytes = 0;
  int64_t device_scratch_bytes = 0;
  // CPU offload: decoder layers whose matrices live in pinned host memory (the last ones), and those bytes.
  int64_t offloaded_layers = 0;
  int64_t host_pinned_bytes = 0;
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;
  int tp = 1;  // tensor-parallel ranks (LoadOptions::tp); the sizes above are the whole model's
};

// Seconds and calls per op kind ("linear", "attention", "rms_norm", ...), filled when profiling.
struct OpTimes {
  std::map<std::string, double> seconds;
  std::map<std::string, int64_t> calls;
  // Every timed op in order (a Chrome/Perfetto trace's events): start relative to the model's load, seconds.
  // Capped at kMaxEvents so a long profiled run cannot grow without bound; `dropped` counts the rest.
  struct Event {
    const char* name;  // a string literal of the engine's op names
    double start_s, dur_s;
  };
  static constexpr size_t kMaxEvents = size_t(1) << 20;
  std::vector<Event> events;
  int64_t dropped = 0;
  void clear() { seconds.clear(); calls.clear(); events.clear(); dropped = 0; }
};

class Session;

class Model : public std::enable_shared_from_this<Model> {
 public:
  static std::shared_ptr<Model> load(const std::filesystem::path& dir, const LoadOptions& opts = {});
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // A new sequence with its own KV cache (max_context positions); out_of_memory, before allocating, when the cache
  // cannot fit in memory.
  //
  // Threads: a Model may be shared by several threads, each driving its own Session: the sessions of one Model share
  // the backend's step buffers, so the Model runs one session call (prefill, decode, a logits download, creating or
  // destroying a session) at a time and the others wait -- the results are those of running them in turn. Use one
  // Model per thread for parallel speed. One Session is one sequence: use it from one thread at a time. info() is
  // immutable; op_times() is not synchronized (read it when no session runs). A Session keeps its Model alive, so
  // releasing the last shared_ptr to the Model while sessions run is safe.
  virtual std::unique_ptr<Session> new_session() = 0;
  virtual OpTimes& op_times() = 0;
  // CUDA graphs of this model's graph-eligible steps so far (decode steps, chain verification steps; all zero on
  // backends without graphs): steps captured into a new graph, steps replayed from one, and steps run eagerly
  // (graphs off, or a step the backend could not capture). Like op_times(), read it when no session runs.
  struct GraphCounts {
    int64_t captured = 0, replayed = 0, eager = 0;
  };
  virtual GraphCounts graph_counts() const { return {}; }
};

class Session {
 public:
  virtual ~Session() = default;
  // Runs the tokens through the model (in chunks of prefill_chunk), appending them to the cache. Afterwards
  // logits() is the last token's row; with all_logits, all_logits() holds every row [tokens.size(), vocab].
  // Throws invalid_argument if position() + tokens.size() > max_context or an id is out of range.
  virtual void prefill(std::span<const int32_t> tokens, bool all_logits = false) = 0;
  virtual void decode(int32_t token) = 0;            // one token (prefill of one, graph-friendly path)
  // [vocab], f32: the last row computed by prefill / decode / generate. generate()'s greedy steps leave the row on
  // the device (only its argmax is downloaded); logits() then downloads it on first use (so on a GPU the first
  // call after generate() costs one row transfer). The span stays valid until the session runs again.
  virtual std::span<const float> logits() const = 0;
  virtual const std::vector<float>& all_logits() const = 0;
  virtual int64_t position() const = 0;             // tokens in the cache
  virtual int64_t max_context() const = 0;
  virtual void reset() = 0;                         // empty the cache
  virtual const Model& model() const = 0;

  // ---- speculative decoding (docs/speculative.md) ----
  // Rollback: forget the positions >= new_length (0 <= new_length <= position()); O(1), nothing is copied. Global
  // layers keep every row. Sliding-window rings keep their window + LoadOptions::kv_ring_slack positions, so any
  // rollback of at most kv_ring_slack positions past the last step's start is possible; an older target whose rows a
  // ring overwrote throws invalid_argument naming the oldest reachable length. logits() is stale until the next step.
  virtual void truncate(int64_t new_length);
  // Rows one verification step may have and still be rolled back (kv_ring_slack + 1 with sliding-window layers).
  virtual int64_t max_verify_rows() const;
  // Verification of a chain: appends `tokens` (one step when tokens.size() <= max_verify_rows()) and keeps every
  // row's logits in all_logits() [n, vocab]. On the CPU backend each row is bitwise what decode() of that token at that
  // position gives (attention one query row at a time, GEMV blocks of <= 8 rows), so greedy speculative decoding
  // reproduces plain decoding exactly. Intermediates are f32 on every backend (as in decode steps).
  virtual void forward_all_logits(std::span<const int32_t> tokens);
  // Verification of a token tree (SpecInfer): parents[0] = -1, parents[i] in [0, i); node i sits at position
  // position() + depth(i) and attends to the cache and to its ancestors only. all_logits() row i is the next-token
  // logits after node i. position() does not move: accept_tree_path(nodes) then keeps a root-to-node path
  // (nodes[0] = 0, each the previous one's child) and position() becomes position() + nodes.size(); any other call
  // instead discards the tree. Needs supports_tree() (the CPU backend; CUDA verifies chains only).
  virtual bool supports_tree() const { return false; }
  virtual void forward_tree(std::span<const int32_t> tokens, std::span<const int32_t> parents);
  virtual void accept_tree_path(std::span<const int32_t> nodes);
};

// Speculative decoding in generate(): a proposer guesses up to K tokens, the target verifies them in one forward
// pass over K + 1 positions. Greedy output is identical to plain decoding (bitwise on the CPU backend); with
// temperature > 0 the rejection rule of Leviathan et al. / Chen et al. keeps the target's distribution exactly.
struct SpeculativeOptions {
  // A session of a draft model that shares the target's tokenizer (vocab_size <= the target's). At the call it must
  // hold the same tokens as the target session (both empty for a fresh generation).
  Session* draft = nullptr;
  int draft_tokens = 4;       // K per step; 0 = adaptive (acceptance rate and measured step times pick K)
  int max_draft_tokens = 8;   // adaptive K's upper bound (and the n-gram proposer's K when draft_tokens is 0)
  int lookup = 0;             // n-gram prompt lookup: match the last N..1 tokens of prompt + output (0 = off)
  int tree_width = 1;         // > 1: up to W n-gram continuations verified as one token tree (CPU backend)
  bool enabled() const { return draft != nullptr || lookup > 0; }
};

// What speculation did (GenerationResult::spec; all zero without speculation).
struct SpecStats {
  std::string proposer;        // "draft", "ngram", "ngram-tree", "draft+ngram"
  int64_t steps = 0;           // target forwards: verifications, and plain decode steps when nothing was proposed
  int64_t proposed = 0;        // draft tokens put to the target (tree: every node but the root)
  int64_t accepted = 0;        // of those, accepted
  int64_t emitted = 0;         // tokens the steps produced (accepted + one per step, until a stop)
  double proposer_s = 0;       // time in the proposer (draft model forwards, n-gram search)
  double verifier_s = 0;       // time in target forwards (verifications and plain steps)
  double sampling_s = 0;       // acceptance tests and sampling
  std::vector<int64_t> k_histogram;  // steps by the number of draft tokens proposed (index = K; 0: plain steps)
  // Estimated speed-up of the decode phase over plain decoding: tokens per step x the cost of one plain decode step
  // (measured, else the verification times' fit t(T) = a + b T at T = 1) / the time per step; 0 when the fit had one
  // T only.
  double speedup_estimate = 0;
  double acceptance_rate() const { return proposed > 0 ? double(accepted) / double(proposed) : 0; }
  double mean_accepted_length() const { return steps > 0 ? double(emitted) / double(steps) : 0; }
  double proposer_s_per_step() const { return steps > 0 ? proposer_s / double(steps) : 0; }
  double verifier_s_per_step() const { return steps > 0 ? verifier_s / double(steps) : 0; }
};

struct GenerateOptions {
  int64_t max_new_tokens = 128;  // must be >= 1
  float temperature = 0.0f;      // 0: greedy
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  bool stop_at_eos = true;       // stop on the model's eos ids
  std::vector<int32_t> stop_ids; // more stop ids
  SpeculativeOptions speculative; // off unless a draft session or lookup is given
};

struct GenerationResult {
  std::vector<int32_t> tokens;   // generated ids (a stop id that ended generation is included)
  std::string stop_reason;       // "eos", "length", "context", "callback"
  int64_t prompt_tokens = 0;
  double time_to_first_token_s = 0;  // prefill + first sample
  double prefill_s = 0, decode_s = 0;
  int64_t decode_steps = 0;      // tokens produced after the first (with speculation: not forward passes)
  SpecStats spec;
  double prefill_tokens_per_s() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0; }
  double decode_tokens_per_s() const { return decode_s > 0 ? decode_steps / decode_s : 0; }
};

// Prefills `prompt` (appended to what the session already holds) and samples up to max_new_tokens tokens,
// calling on_token(id) for each as soon as it is chosen; on_token returning false stops generation.
// Stops early on eos / stop ids (the stop token is reported and included) or when the context is full.
// Greedy decoding (temperature 0, or top_k 1, without a repetition penalty) computes the argmax where the logits
// are (on the GPU: only the id is downloaded), with the sampler's rules (lowest id on ties; top_k 1 draws among
// ties through the sampler), so the tokens are the ones sampling the downloaded logits would give.
// FLASHKIT_DEVICE_ARGMAX=0 in the environment turns this off.
GenerationResult generate(Session& session, std::span<const int32_t> prompt, const GenerateOptions& opts,
                          const std::function<bool(int32_t)>& on_token = {});

}  // namespace flashkit
