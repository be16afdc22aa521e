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
// .gguf file (config from its metadata; f32/f16/bf16 tensors are converted at load; Q8_0 matrices stay Q8_0 on the
// CPU with dtype auto or q8_0, and are converted to bf16 on CUDA).
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
#include <span>
#include <string>
#include <vector>

namespace flashkit {

struct LoadOptions {
  std::string device = "cpu";   // "cpu" or "cuda" / "cuda:N"
  std::string dtype = "auto";   // weight storage: auto | f32 | bf16 | f16 | q8_0 (CPU, Q8_0 GGUFs)
  int threads = 0;              // CPU threads (0: flashkit::num_threads())
  int64_t max_context = 0;      // KV capacity per session (0: min(max_position_embeddings, 4096))
  int64_t prefill_chunk = 512;  // prompt tokens per forward pass
  bool profile = false;         // time every op kind (adds a device sync per op)
  // Test / benchmark hook: ignore the safetensors files and fill every weight with seeded random values
  // (the directory, or a config.json path, only provides the config).
  bool random_weights = false;
  uint64_t random_seed = 1;
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
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;
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
};

struct GenerationResult {
  std::vector<int32_t> tokens;   // generated ids (a stop id that ended generation is included)
  std::string stop_reason;       // "eos", "length", "context", "callback"
  int64_t prompt_tokens = 0;
  double time_to_first_token_s = 0;  // prefill + first sample
  double prefill_s = 0, decode_s = 0;
  int64_t decode_steps = 0;
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
