// Each CLI subcommand lives in its own file and registers itself on the root app here.
#pragma once
#include <CLI/CLI.hpp>

namespace flashkit::cli {

void add_bench_command(CLI::App& app);     // cmd_bench.cpp: flashkit bench attention
void add_info_command(CLI::App& app);      // main.cpp: flashkit info
void add_analysis_commands(CLI::App& app); // cmd_analysis.cpp: flashkit roofline | cost | profile
void add_tokenize_commands(CLI::App& app); // cmd_tokenize.cpp: flashkit tokenize | detokenize
void add_generate_commands(CLI::App& app); // cmd_generate.cpp: flashkit generate | chat
void add_train_commands(CLI::App& app);    // cmd_train.cpp: flashkit train | train-tokenizer | prepare-data | perplexity
void add_spec_bench_command(CLI::App& app); // cmd_spec.cpp: flashkit bench spec (after add_bench_command)
void add_bench_ssm_command(CLI::App& app);  // cmd_bench_ssm.cpp: flashkit bench ssm (after add_bench_command)
void add_serve_commands(CLI::App& app);    // cmd_serve.cpp: flashkit serve | bench serve (after add_bench_command)
void add_eval_commands(CLI::App& app);     // cmd_eval.cpp: flashkit eval

}  // namespace flashkit::cli
