// Training: small Llama / Gemma-3-style and Mamba-1 language models (the engine's architectures) and their tokenizers.
//
//   auto recipe = flashkit::train::load_recipe("models/recipes/draft.json");
//   flashkit::train::TrainResult r = flashkit::train::train(recipe, {});   // checkpoints + a Hugging Face model dir
//   auto model = flashkit::Model::load(r.model_dir);                        // the engine runs what was trained
//
// A recipe is JSON (docs/training.md lists every field): the architecture as a Hugging Face config block, data
// files (prepare_data() output), the schedule, batch, sequence length, steps, gradient accumulation, seed, eval /
// checkpoint / log intervals, the output directory and the device. Unknown or inconsistent fields are errors
// naming the field. Training is f32 on the CPU (AdamW, warmup + cosine, global-norm clipping); checkpoints are
// atomic and resumable bit-identically; the final model is written as config.json + model.safetensors + tokenizer
// files. Errors are flashkit::Error naming the file, field or step at fault.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace flashkit {
class Model;
}

namespace flashkit::train {

struct Recipe {
  std::string source = "recipe";  // where it came from (messages)
  std::string text;               // the recipe as given (copied into the run directory)
  std::string model_json;         // the "model" block: a Hugging Face config.json (llama, gemma3_text or mamba)
  std::filesystem::path train_data, val_data;  // token files (prepare_data); val optional
  std::filesystem::path tokenizer;             // tokenizer directory copied into the exported model (optional)
  std::string device = "cpu";
  int threads = 0;                // CPU threads (0: flashkit's default)
  int64_t steps = 0, batch_size = 0, seq_len = 0, grad_accum = 1;
  double lr = 3e-4, min_lr_ratio = 0.1;  // cosine from lr down to lr * min_lr_ratio at the last step
  int64_t warmup_steps = 0;              // linear warmup from 0
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8, grad_clip = 1.0;  // grad_clip 0: off
  uint64_t seed = 1;
  int64_t log_interval = 10;          // progress line + JSON-lines record every N steps
  int64_t eval_interval = 0;          // validation loss every N steps (0: only at the end, if val data is given)
  int64_t eval_batches = 8;           // batches of batch_size x seq_len per evaluation
  int64_t checkpoint_interval = 0;    // 0: only the final checkpoint
  int64_t keep_checkpoints = 2;       // older step_* directories are deleted
  std::filesystem::path output_dir;   // checkpoints/, log.jsonl, model/ (unless model_dir is set)
  std::filesystem::path model_dir;    // the exported Hugging Face directory (default output_dir/model)
  std::string export_dtype = "f32";   // f32 | bf16 | f16 (storage of model.safetensors)
  double peak_tflops = 0;             // for MFU (0: the CLI fills in the device's figure)
};

// Parses a recipe (JSON text); `where` names it in messages. Relative paths stay relative (to the working dir).
Recipe parse_recipe(const std::string& json_text, const std::string& where);
Recipe load_recipe(const std::filesystem::path& file);

struct StepReport {
  int64_t step = 0, total_steps = 0;  // step counts completed steps (1-based)
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, mfu = 0, eta_s = 0, elapsed_s = 0;
  double val_loss = -1;  // >= 0 when this step ran an evaluation
};

struct TrainOptions {
  std::filesystem::path resume;  // a run's output dir (its latest checkpoint) or one checkpoint dir
  bool quiet = false;            // no progress lines on stderr
  int64_t stop_at = 0;           // > 0: end this run after that step with a checkpoint and no export (the schedule
                                 // still follows the recipe's steps; --resume continues it)
  std::function<void(const StepReport&)> on_report;  // every log interval and evaluation
  // Verification (tools/gpu/train_hf_check.py): a fresh run writes its first step here -- the initial weights as
  // an f32 Hugging Face directory, the batch, the loss and every parameter's gradient (train/checkpoint.hpp,
  // write_step_dump). Empty: off. Not with resume.
  std::filesystem::path dump_first_step;
  // Data parallelism (docs/distributed.md): the recipe's batch_size is the global batch, split into
  // data_parallel equal shares (batch_size must divide); gradients are summed over the ranks and each rank keeps
  // 1/data_parallel of the AdamW state (ZeRO-1). On the CPU the ranks are threads of this process; on CUDA this
  // process is rank dp_rank of data_parallel processes (one GPU each, device index + rank, over NCCL) started by
  // the CLI's launcher, and dp_rendezvous is the file through which rank 0 hands out the NCCL id.
  int data_parallel = 1;
  int dp_rank = 0;
  std::filesystem::path dp_rendezvous;
  int64_t grad_bucket_elems = 0;  // gradient all-reduce bucket in elements (0: 4 Mi)
  bool overlap_grad_comm = true;  // all-reduce each layer's gradients during the backward (false: after it)
  bool dp_threads = false;  // thread ranks on CUDA too, all on the recipe's device (the DP check on one GPU)
};

struct TrainResult {
  int64_t steps = 0;                       // the step the run ended at
  double final_loss = 0, final_val_loss = -1;
  std::filesystem::path checkpoint_dir;    // the last checkpoint
  std::filesystem::path model_dir;         // the exported Hugging Face directory
  int64_t parameters = 0;
};

// Trains as the recipe says (resuming when options.resume is set). A NaN/inf loss or gradient stops the run
// with an error naming the step; checkpoints already written stay (the latest one is the last good state).
TrainResult train(const Recipe& recipe, const TrainOptions& options = {});

// ---- data ----
struct PrepareOptions {
  std::filesystem::path tokenizer_dir;
  std::vector<std::filesystem::path> inputs;  // text files (a directory: its *.txt files, sorted)
  std::filesystem::path output_dir;           // train.bin, val.bin, meta.json
  double val_fraction = 0.01;                 // the tail of every document (input file) goes to val.bin
  bool add_bos = true;                        // BOS before every document (when the tokenizer has one)
  // Called before each input file is tokenized (done files of total; the front end decides what to print).
  std::function<void(int64_t done, int64_t total, const std::filesystem::path& file)> progress;
};
struct PrepareResult {
  int64_t documents = 0, bytes = 0, train_tokens = 0, val_tokens = 0, vocab_size = 0;
};
PrepareResult prepare_data(const PrepareOptions& opts);

// Synthetic tasks for long-context work, as token files (no tokenizer): ids 0..vocab-1.
//   copy: [BOS] x_1..x_n [SEP] x_1..x_n [EOS]; mqar (multi-query associative recall): [BOS] k_1 v_1 .. k_n v_n
//   [SEP] then queries k_i v_i for a seeded permutation of the pairs, [EOS]. Keys and values come from disjoint
//   id ranges. Examples are packed back to back; seq_len is each example's length (n follows from it).
struct SyntheticOptions {
  std::string task;            // copy | mqar
  int64_t vocab_size = 256, seq_len = 128, examples = 1000, val_examples = 100;
  uint64_t seed = 1;
  std::filesystem::path output_dir;
};
PrepareResult prepare_synthetic(const SyntheticOptions& opts);

// ---- tokenizer training ----
struct BpeOptions {
  int64_t vocab_size = 8192;   // total, special tokens and the 256 byte tokens included
  int64_t min_frequency = 2;   // pairs seen fewer times are not merged (the vocabulary may end up smaller)
  std::vector<std::string> special_tokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"};
  std::string bos_token = "<|begin_of_text|>", eos_token = "<|end_of_text|>";
  int64_t max_bytes = 0;       // read at most this many bytes of input (0: all)
};
struct BpeResult {
  int64_t vocab_size = 0, merges = 0, bytes = 0, words = 0;
  double seconds = 0;
};
// Byte-level BPE (GPT-2 / Llama-3 style: regex pre-tokenizer, ByteLevel decoder) trained on the files; writes
// out_dir/tokenizer.json and tokenizer_config.json (bos/eos tokens, a ChatML-style Jinja chat template).
BpeResult train_bpe(const std::vector<std::filesystem::path>& files, const BpeOptions& opts,
                    const std::filesystem::path& out_dir);

// ---- evaluation through the engine ----
struct PerplexityResult {
  int64_t tokens = 0;       // scored tokens
  double mean_nll = 0;      // nats per token
  double perplexity = 0;    // exp(mean_nll)
  std::vector<float> nll;   // per scored token, in text order
};
// Sliding windows of `ctx` tokens advancing by `stride` (1 <= stride < ctx): every token is scored once, in the
// first window that holds it after at least one token of context (Hugging Face's strided perplexity); with
// bos >= 0 every window starts with BOS (then holding ctx - 1 text tokens) and the first token is scored too.
// progress (optional): called before each window with the tokens scored so far and the number to score.
PerplexityResult perplexity(Model& model, std::span<const int32_t> ids, int64_t ctx, int64_t stride, int32_t bos,
                            const std::function<void(int64_t scored, int64_t total)>& progress = {});

}  // namespace flashkit::train
