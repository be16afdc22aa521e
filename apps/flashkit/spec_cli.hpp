// Speculative decoding in the CLI (cmd_spec.cpp): the options of `flashkit generate` (--draft, --draft-tokens,
// --lookup, --spec-tree, --spec-compare), loading the draft model, the stderr / JSON report; `flashkit bench spec`.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flashkit/engine.hpp"

namespace flashkit::cli {

struct SpecArgs {
  std::string draft;                // draft model directory (or config.json with --random-weights)
  std::string draft_tokens = "4";   // K or "auto"
  int max_draft_tokens = 8;         // auto's upper bound
  int lookup = 0;                   // n-gram prompt lookup: longest n-gram matched
  int tree = 1;                     // n-gram token tree width
  bool compare = false;             // also run plain decoding: measured speed-up, outputs compared
  bool active() const { return !draft.empty() || lookup > 0; }
};

void add_spec_options(CLI::App* cmd, SpecArgs* a);
// Checks the option values (before any model loads).
void validate_spec_args(const SpecArgs& a);

// The draft model and its session for one generation; fills GenerateOptions::speculative.
class SpecSetup {
 public:
  // target_dir / target_load: how the target was loaded (the draft gets the same device, dtype, threads, context).
  SpecSetup(const SpecArgs& a, const std::string& target_dir, const LoadOptions& target_load, const Model& target);
  void apply(GenerateOptions& g) const;  // sets g.speculative (no-op when speculation is off)
  const Model* draft_model() const { return draft_model_.get(); }

 private:
  SpecArgs a_;
  std::shared_ptr<Model> draft_model_;
  std::unique_ptr<Session> draft_session_;
};

// The speculative part of generate's report: lines on stderr (unless quiet) and a "speculative" JSON object.
// baseline_tps > 0: plain decoding's measured decode tokens/s (--spec-compare), same_output: its tokens matched.
nlohmann::json spec_report(const SpecArgs& a, const GenerationResult& r, double baseline_tps, int same_output,
                           bool quiet);

}  // namespace flashkit::cli
