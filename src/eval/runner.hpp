// The eval loop (docs/eval.md): for every (task, length, depth) cell, `samples` seeded samples. Text tasks are
// greedy generations; with batch > 1 a cell's samples run together through a serve::Engine (continuous batching and
// its prefix cache: a cell's samples share their filler up to the needle, and cells at later depths share more), else
// one engine Session each through generate(). Both give the same tokens (the engine's greedy contract; tested).
// Id-level mqar is one teacher-forced prefill per sample on a Session of its own (its score needs every query's
// logits row, which the serving engine does not return).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/tasks.hpp"

namespace flashkit {
class Model;
class Tokenizer;
namespace serve {
class Engine;
}
}  // namespace flashkit

namespace flashkit::eval {

struct EvalConfig {
  std::vector<std::string> tasks;
  std::vector<int64_t> lengths;  // tokens: prompt + answer budget
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int64_t samples = 4;           // per cell
  uint64_t seed = 1;
  int64_t batch = 0;             // text samples in flight at once (serve::Engine's max_running); 1: a Session
                                 // each; 0: default_batch()
};

// The batch when none is given: 8 for models with a KV cache, through the serving engine, whose chunked prefill
// attends with the flash kernel on every backend (engine/paged_spans.hpp). Measured: 1.65x over a Session each on
// the CPU (bench/results/eval-batched-cpu), 1.46x on the H200 at 256/512 tokens (bench/results/eval-batched-cuda-h200)
// and 1.95x at 4k (bench/results/paged-prefill-h200). Models without a KV cache (Mamba) gain nothing from the engine,
// which runs them one Session each anyway: 1.
int64_t default_batch(bool has_kv_cache);

struct CellResult {
  std::string task;
  int64_t length = 0;
  double depth = -1;      // -1: the task has no depth
  int64_t n = 0;          // samples
  double score_sum = 0;   // sum of per-sample scores (accuracy = score_sum / n)
  int64_t prompt_tokens = 0, generated_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV came from the serving engine's prefix cache
  double seconds = 0;       // wall time of the cell (its samples run together when batched)
  double accuracy() const { return n ? score_sum / double(n) : 0; }
  double tokens_per_s() const { return seconds > 0 ? double(prompt_tokens + generated_tokens) / seconds : 0; }
};

// Checks the configuration against the model before any work: known tasks, samples >= 1, lengths >= 1 and within
// `context` (the model's max_position_embeddings), depths in [0, 1], batch in [0, 4096], text tasks only with a
// tokenizer. Throws invalid_argument naming the option (--task, --samples, --lengths, --depths, --batch).
void validate(const EvalConfig& config, int64_t context, bool has_tokenizer);

// One sample's greedy answer: text tasks' generation is decoded; id mqar's argmax per query.
struct SampleOutcome {
  double score = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  int64_t cached_tokens = 0;  // run_text_samples: prompt tokens served from the prefix cache
  std::string generation;
};
SampleOutcome run_sample(Model& model, const Tokenizer* tokenizer, const Sample& sample);
// Text samples together through `engine` (created with background = false: this steps it; greedy; each ends where
// run_sample's would): outcomes in sample order. The first sample runs alone until its prompt is computed, so that
// the others find the filler they share with it in the prefix cache. A request that fails throws (naming the sample).
std::vector<SampleOutcome> run_text_samples(serve::Engine& engine, const Tokenizer& tokenizer,
                                            const std::vector<Sample>& samples);

// Every cell in order (task, length, depth); `progress` is called after each cell. Before any model work, the
// first sample of every (task, length) is built, so that a length too short for a task fails at once. With batch > 1
// and text tasks, one serve::Engine (caller-stepped, on this thread) serves every cell; a backend without one falls
// back to the Session loop (EvalRun::batched says which ran).
using Progress = std::function<void(const CellResult& cell, int64_t done, int64_t total)>;
struct EvalRun {
  std::vector<CellResult> cells;
  int64_t batch = 1;                // the batch used (EvalConfig::batch, or default_batch())
  bool batched = false;             // text cells went through serve::Engine
  int64_t prefix_hit_tokens = 0;    // prompt tokens whose KV came from the engine's prefix cache
};
EvalRun run_eval(Model& model, const Tokenizer* tokenizer, const EvalConfig& config, const Progress& progress = {});

// The results document: {"model", "seed", "samples", "batch", "batched", "prefix_hit_tokens", "cells": [{task,
// length, depth (null without), accuracy, n, tokens_per_s, prompt_tokens_mean, cached_tokens, seconds}]}.
nlohmann::json results_json(const std::string& model_name, const EvalConfig& config, const EvalRun& run);

}  // namespace flashkit::eval
