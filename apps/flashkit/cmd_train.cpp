// flashkit train | train-tokenizer | prepare-data | perplexity (src/train, docs/training.md):
//   flashkit train --config RECIPE.json [--resume DIR] [--steps N] [--output DIR] [--device D] [--threads N] [-q]
//                  [--dump-step1 DIR] [--dp N]
//   flashkit train-tokenizer --vocab-size N -o DIR FILES...
//   flashkit prepare-data --tokenizer DIR -o DIR [--val-fraction F] FILES...
//   flashkit prepare-data --synthetic copy|mqar -o DIR [--vocab-size N --seq-len N --examples N --seed S]
//   flashkit perplexity -m DIR -f FILE [--ctx N --stride S] [--per-token FILE] [--no-bos] [--device D]
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/hardware.hpp"
#include "analysis/roofline.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"
#include "progress.hpp"
#include "core/limits.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/train.hpp"
#include "dist/comm.hpp"
#include "dist/launch.hpp"

namespace flashkit::cli {

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

// The device's dense peak for MFU: the datasheet bf16 figure of the GPU (the CUDA path computes in bf16), the
// measured f32 rate of this CPU; 0 (MFU not shown) when unknown.
double peak_tflops_for(const std::string& device) {
  try {
    if (device == "cpu") return analysis::peak_tflops(analysis::find_device("cpu"), "f32");
    analysis::DeviceSpec spec;
    if (analysis::match_device(analysis::gpu_name(), &spec)) return analysis::peak_tflops(spec, "bf16");
  } catch (const std::exception&) {
  }
  return 0;
}

// --dp N (or a torchrun-style WORLD_SIZE): on the CPU, N thread ranks inside train(); on CUDA, N processes, one
// GPU each: the first invocation becomes rank 0 and re-executes itself for ranks 1..N-1 (src/dist/launch.hpp),
// which find their rank in the environment. Returns the launcher (rank 0 of a launched job) or null.
std::unique_ptr<dist::RankLauncher> prepare_data_parallel(int dp_arg, const train::Recipe& r, train::TrainOptions& o) {
  const dist::RankEnv env = dist::rank_env();
  const int dp = dp_arg != -1 ? dp_arg : env.world_size;
  if (dp < 1) bad("--dp: must be >= 1, got " + std::to_string(dp));
  o.data_parallel = dp;
  if (env.launched && env.world_size != dp)
    bad("--dp " + std::to_string(dp) + ": this process was launched as one of WORLD_SIZE=" +
        std::to_string(env.world_size) + " ranks");
  if (dp == 1 || r.device == "cpu" || o.dp_threads) {
    if (env.launched && dp > 1) bad("--dp " + std::to_string(dp) + " on the CPU runs thread ranks in one process; "
                                    "do not launch it with WORLD_SIZE set");
    return nullptr;
  }
  if (!dist::nccl_built())
    fail(Status::unsupported, "--dp " + std::to_string(dp) + " on " + r.device +
                                  ": NCCL communicator not built (this flashkit was built without NCCL)");
  const int base = r.device.size() > 5 ? std::atoi(r.device.c_str() + 5) : 0;
  const int gpus = cuda_device_count();
  if (base + dp > gpus)
    bad("--dp " + std::to_string(dp) + ": device " + r.device + " with " + std::to_string(dp) +
        " ranks needs CUDA devices " + std::to_string(base) + ".." + std::to_string(base + dp - 1) + ", this machine has " +
        std::to_string(gpus));
  if (env.launched) {
    if (env.rendezvous.empty())
      bad("--dp " + std::to_string(dp) + ": FLASHKIT_RENDEZVOUS must name the file rank 0 writes the NCCL id to");
    o.dp_rank = env.rank;
    o.dp_rendezvous = env.rendezvous;
    o.quiet = o.quiet || env.rank != 0;
    return nullptr;
  }
  std::filesystem::create_directories(r.output_dir);
  const auto rendezvous = r.output_dir / (".nccl-id-" + std::to_string(::getpid()));
  std::filesystem::remove(rendezvous);
  o.dp_rank = 0;
  o.dp_rendezvous = rendezvous;
  return std::make_unique<dist::RankLauncher>(dist::self_exe(), dist::self_args(), dp, rendezvous.string());
}

void add_train(CLI::App& app) {
  struct Args {
    std::string config, resume, output, device, dump_step1;
    int64_t steps = 0;
    int threads = -1, dp = -1;  // dp -1: unset
    bool quiet = false, dp_threads = false;
  };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("train", "Train a Llama / Gemma-3-style or Mamba model from a recipe (docs/training.md)");
  c->add_option("--config", a->config, "Recipe JSON (model config block, data, schedule, output)")->required();
  c->add_option("--resume", a->resume, "Continue from a run directory's latest checkpoint (or one checkpoint dir)");
  c->add_option("--steps", a->steps, "Override train.steps (e.g. a short CPU run of a GPU recipe; the warmup is scaled)")
      ->check(int_range(1, limits::kMaxTrainSteps));
  c->add_option("--output", a->output, "Override output.dir");
  c->add_option("--device", a->device, "Override device: cpu | cuda | cuda:N");
  c->add_option("-t,--threads", a->threads, "Override threads (CPU; 0: flashkit's default)")->check(thread_count());
  c->add_flag("-q,--quiet", a->quiet, "No progress lines");
  c->add_option("--dump-step1", a->dump_step1,
                "Verification: write step 1's initial weights (f32 HF dir), batch, loss and gradients to DIR");
  c->add_option("--dp", a->dp,
                "Data-parallel ranks sharing the recipe's (global) batch: threads on the CPU, one process per GPU "
                "on CUDA (default 1, or WORLD_SIZE when launched by torchrun)");
  c->add_flag("--dp-threads", a->dp_threads,
              "Run the --dp ranks as threads of this process on CUDA too, all on one GPU (checks the DP path)");
  c->callback([a] {
    train::Recipe r = train::load_recipe(a->config);
    if (a->steps > 0) {  // a shorter (or longer) run of the same schedule: the warmup keeps its share of the steps
      r.warmup_steps = std::min(a->steps, (r.warmup_steps * a->steps + r.steps / 2) / r.steps);
      r.steps = a->steps;
    }
    if (!a->output.empty()) {
      r.output_dir = a->output;
      r.model_dir.clear();
    }
    if (!a->device.empty()) r.device = a->device;
    if (a->threads >= 0) r.threads = a->threads;
    if (r.peak_tflops == 0) r.peak_tflops = peak_tflops_for(r.device);
    train::TrainOptions o;
    o.resume = a->resume;
    o.quiet = a->quiet;
    o.dump_first_step = a->dump_step1;
    o.dp_threads = a->dp_threads;
    std::unique_ptr<dist::RankLauncher> launcher = prepare_data_parallel(a->dp, r, o);
    const train::TrainResult res = train::train(r, o);
    if (launcher) {
      const std::string failed = dist::describe_failures(launcher->wait());
      std::error_code ec;
      std::filesystem::remove(o.dp_rendezvous, ec);
      if (!failed.empty()) fail(Status::internal, "--dp " + std::to_string(o.data_parallel) + ": " + failed);
    }
    if (o.dp_rank != 0) return;  // rank 0 reports
    std::fprintf(stderr, "trained %lld steps (%lld parameters): loss %.4f%s; checkpoint %s; model %s\n",
                 static_cast<long long>(res.steps), static_cast<long long>(res.parameters), res.final_loss,
                 res.final_val_loss >= 0 ? (", val " + std::to_string(res.final_val_loss)).c_str() : "",
                 res.checkpoint_dir.c_str(), res.model_dir.c_str());
  });
}

void add_train_tokenizer(CLI::App& app) {
  struct Args {
    int64_t vocab = 8192, min_freq = 2, max_bytes = 0;
    std::string out;
    std::vector<std::string> files;
  };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("train-tokenizer", "Train a byte-level BPE tokenizer (writes tokenizer.json)");
  // The vocabulary's lower bound also counts the special tokens: train_bpe checks that.
  c->add_option("--vocab-size", a->vocab, "Vocabulary size, special and byte tokens included (default 8192)")
      ->check(int_range(256, limits::kMaxBpeVocab));
  c->add_option("--min-frequency", a->min_freq, "Do not merge pairs seen fewer times (default 2)")
      ->check(int_range(1, std::numeric_limits<int64_t>::max()));
  c->add_option("--max-bytes", a->max_bytes, "Read at most this many bytes of text (default 0: all)")
      ->check(int_range(0, std::numeric_limits<int64_t>::max()));
  c->add_option("-o,--output", a->out, "Output directory")->required();
  c->add_option("files", a->files, "Text files")->required();
  c->callback([a] {
    train::BpeOptions o;
    o.vocab_size = a->vocab;
    o.min_frequency = a->min_freq;
    o.max_bytes = a->max_bytes;
    std::vector<std::filesystem::path> files(a->files.begin(), a->files.end());
    const train::BpeResult r = train::train_bpe(files, o, a->out);
    std::fprintf(stderr, "tokenizer: %lld tokens (%lld merges) from %lld bytes, %lld distinct words, %.1f s -> %s\n",
                 static_cast<long long>(r.vocab_size), static_cast<long long>(r.merges), static_cast<long long>(r.bytes),
                 static_cast<long long>(r.words), r.seconds, a->out.c_str());
  });
}

void add_prepare_data(CLI::App& app) {
  struct Args {
    std::string tokenizer, out, synthetic;
    double val_fraction = 0.01;
    bool no_bos = false, quiet = false;
    int64_t vocab = 256, seq = 128, examples = 1000, val_examples = 100;
    uint64_t seed = 1;
    std::vector<std::string> files;
  };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("prepare-data", "Tokenize text files into train/val token files (or synthesize tasks)");
  c->add_option("--tokenizer", a->tokenizer, "Directory with tokenizer.json, or a tokenizer.json file");
  c->add_option("-o,--output", a->out, "Output directory (train.bin, val.bin, meta.json)")->required();
  c->add_option("--val-fraction", a->val_fraction, "Tail fraction of every document kept for validation (default 0.01)")
      ->check(real_range(0, 1, false, true));
  c->add_flag("--no-bos", a->no_bos, "Do not put BOS before every document");
  c->add_flag("-q,--quiet", a->quiet, "No progress lines");
  c->add_option("--synthetic", a->synthetic, "Generate a synthetic task instead: copy | mqar");
  // The synthetic ranges are prepare_synthetic's (16..65536 ids: 16-bit token files; 8 tokens: BOS, SEP, EOS + pairs).
  c->add_option("--vocab-size", a->vocab, "Synthetic: vocabulary (default 256)")->check(int_range(16, 65536));
  c->add_option("--seq-len", a->seq, "Synthetic: tokens per example (default 128)")
      ->check(int_range(8, limits::kMaxContext));
  c->add_option("--examples", a->examples, "Synthetic: training examples (default 1000)")
      ->check(int_range(1, limits::kMaxSyntheticExamples));
  c->add_option("--val-examples", a->val_examples, "Synthetic: validation examples (default 100)")
      ->check(int_range(0, limits::kMaxSyntheticExamples));
  c->add_option("--seed", a->seed, "Synthetic: seed (default 1)")->check(uint64_value());
  c->add_option("files", a->files, "Text files or directories of .txt files");
  c->callback([a] {
    train::PrepareResult r;
    if (!a->synthetic.empty()) {
      if (!a->files.empty()) bad("prepare-data: --synthetic takes no input files");
      // Both splits are held in memory as int32 ids before they are written.
      check_memory(4.0 * double(a->seq) * (double(a->examples) + double(a->val_examples)),
                   "prepare-data --synthetic (--examples + --val-examples) x --seq-len tokens");
      train::SyntheticOptions o;
      o.task = a->synthetic;
      o.vocab_size = a->vocab;
      o.seq_len = a->seq;
      o.examples = a->examples;
      o.val_examples = a->val_examples;
      o.seed = a->seed;
      o.output_dir = a->out;
      r = train::prepare_synthetic(o);
    } else {
      if (a->tokenizer.empty()) bad("prepare-data: --tokenizer DIR is required (or --synthetic)");
      if (a->files.empty()) bad("prepare-data: no input files");
      train::PrepareOptions o;
      o.tokenizer_dir = tokenizer_dir(a->tokenizer, "--tokenizer");
      o.inputs.assign(a->files.begin(), a->files.end());
      o.output_dir = a->out;
      o.val_fraction = a->val_fraction;
      o.add_bos = !a->no_bos;
      std::optional<cli::Progress> progress;  // sized by the first call (directories expand to their files)
      o.progress = [&](int64_t done, int64_t total, const std::filesystem::path& f) {
        if (!progress) progress.emplace("prepare-data", total, a->quiet);
        progress->step(done, f.filename().string());
      };
      r = train::prepare_data(o);
    }
    std::fprintf(stderr, "prepare-data: %lld documents, %lld bytes -> %lld train + %lld val tokens (vocab %lld) in %s\n",
                 static_cast<long long>(r.documents), static_cast<long long>(r.bytes),
                 static_cast<long long>(r.train_tokens), static_cast<long long>(r.val_tokens),
                 static_cast<long long>(r.vocab_size), a->out.c_str());
  });
}

void add_perplexity(CLI::App& app) {
  struct Args {
    std::string model, file, per_token, device = "cpu", dtype = "auto";
    int64_t ctx = 0, stride = 0;
    int threads = 0;
    bool no_bos = false, json = false, quiet = false;
  };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("perplexity", "Per-token loss and perplexity of a text file through the engine");
  c->add_option("-m,--model", a->model, "Model directory")->required();
  c->add_option("-f,--file", a->file, "Text file")->required();
  c->add_option("-c,--ctx-size,--ctx", a->ctx, "Window length in tokens (default min(model context, 512))")
      ->check(int_range(0, limits::kMaxContext));
  c->add_option("--stride", a->stride, "Window advance (default ctx / 2; = the window's text tokens: no overlap)")
      ->check(int_range(0, limits::kMaxContext));
  c->add_option("--per-token", a->per_token, "Write TSV: position, id, token, nll");
  c->add_flag("--no-bos", a->no_bos, "Do not start every window with BOS");
  c->add_flag("--json", a->json, "Print the result as JSON on stdout");
  c->add_flag("-q,--quiet", a->quiet, "No progress lines");
  c->add_option("--device", a->device, "cpu | cuda | cuda:N");
  c->add_option("--dtype", a->dtype, "Weight storage (default auto)");
  c->add_option("-t,--threads", a->threads, "CPU threads (0: flashkit's default)")->check(thread_count());
  c->callback([a] {
    if (!a->per_token.empty()) {  // an unwritable output fails before the model loads
      std::ofstream probe(a->per_token, std::ios::app);
      if (!probe) bad("--per-token: cannot write " + a->per_token);
    }
    const std::string text = read_text_file(a->file, "-f/--file");  // capped at limits::kMaxTextBytes
    // A .gguf file reads the tokenizer.json next to it (as generate does).
    const std::filesystem::path mp(a->model);
    const Tokenizer tok = Tokenizer::from_dir(std::filesystem::is_directory(mp) ? mp : mp.parent_path());
    const std::vector<int32_t> ids = tok.encode(text);
    LoadOptions lo;
    lo.device = a->device;
    lo.dtype = a->dtype;
    lo.threads = a->threads;
    auto model = Model::load(a->model, lo);
    const int64_t ctx = a->ctx > 0 ? a->ctx : std::min<int64_t>(512, model->info().max_context);
    const int32_t bos = a->no_bos || !tok.bos_id() ? -1 : *tok.bos_id();
    const int64_t stride = a->stride > 0 ? a->stride : std::max<int64_t>(1, (ctx - (bos >= 0)) / 2);
    std::optional<cli::Progress> progress;
    const train::PerplexityResult r =
        train::perplexity(*model, ids, ctx, stride, bos, [&](int64_t scored, int64_t total) {
          if (!progress) progress.emplace("perplexity", total, a->quiet);
          progress->step(scored, "tokens scored");
        });
    if (!a->per_token.empty()) {
      std::ofstream o(a->per_token, std::ios::trunc);
      o << "position\tid\ttoken\tnll\n";
      const int64_t first = int64_t(ids.size()) - r.tokens;
      for (int64_t i = 0; i < r.tokens; ++i) {
        const int32_t id = ids[size_t(first + i)];
        o << first + i << "\t" << id << "\t" << nlohmann::json(tok.decode(std::span<const int32_t>(&id, 1))).dump()
          << "\t" << r.nll[size_t(i)] << "\n";
      }
      if (!o) bad("--per-token: cannot write " + a->per_token);
    }
    if (a->json) {
      std::cout << nlohmann::json{{"tokens", r.tokens}, {"mean_nll", r.mean_nll}, {"perplexity", r.perplexity},
                                  {"ctx", ctx}, {"stride", stride}, {"bos", bos >= 0}}
                       .dump()
                << "\n";
    } else {
      std::printf("tokens %lld  mean nll %.4f nats  perplexity %.3f  (ctx %lld, stride %lld)\n",
                  static_cast<long long>(r.tokens), r.mean_nll, r.perplexity, static_cast<long long>(ctx),
                  static_cast<long long>(stride));
    }
  });
}

}  // namespace

void add_train_commands(CLI::App& app) {
  add_train(app);
  add_train_tokenizer(app);
  add_prepare_data(app);
  add_perplexity(app);
}

}  // namespace flashkit::cli
