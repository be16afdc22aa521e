// The eval loop (docs/eval.md): for every (task, length, depth) cell, `samples` seeded samples through one engine
// Session each (reset between samples): text tasks by greedy generate(), id-level mqar by one teacher-forced prefill.
// A plain loop rather than serve::Engine: a sample is one long prefill and a handful of decode steps, where batching
// gains little, and the loop works with any Model (and any future architecture) unchanged.
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
}  // namespace flashkit

namespace flashkit::eval {

struct EvalConfig {
  std::vector<std::string> tasks;
  std::vector<int64_t> lengths;  // tokens: prompt + answer budget
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int64_t samples = 4;           // per cell
  uint64_t seed = 1;
};

struct CellResult {
  std::string task;
  int64_t length = 0;
  double depth = -1;      // -1: the task has no depth
  int64_t n = 0;          // samples
  double score_sum = 0;   // sum of per-sample scores (accuracy = score_sum / n)
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double seconds = 0;
  double accuracy() const { return n ? score_sum / double(n) : 0; }
  double tokens_per_s() const { return seconds > 0 ? double(prompt_tokens + generated_tokens) / seconds : 0; }
};

// Checks the configuration against the model before any work: known tasks, samples >= 1, lengths >= 1 and within
// `context` (the model's max_position_embeddings), depths in [0, 1], text tasks only with a tokenizer. Throws
// invalid_argument naming the option (--task, --samples, --lengths, --depths).
void validate(const EvalConfig& config, int64_t context, bool has_tokenizer);

// One sample's greedy answer: text tasks' generation is decoded; id mqar's argmax per query.
struct SampleOutcome {
  double score = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  std::string generation;
};
SampleOutcome run_sample(Model& model, const Tokenizer* tokenizer, const Sample& sample);

// Every cell in order (task, length, depth); `progress` is called after each cell. Before any model work, the
// first sample of every (task, length) is built, so that a length too short for a task fails at once.
using Progress = std::function<void(const CellResult& cell, int64_t done, int64_t total)>;
std::vector<CellResult> run_eval(Model& model, const Tokenizer* tokenizer, const EvalConfig& config,
                                 const Progress& progress = {});

// The results document: {"model", "seed", "samples", "cells": [{task, length, depth (null without), accuracy, n,
// tokens_per_s, prompt_tokens_mean, seconds}]}.
nlohmann::json results_json(const std::string& model_name, const EvalConfig& config,
                            const std::vector<CellResult>& cells);

}  // namespace flashkit::eval
