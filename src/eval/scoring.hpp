// Exact-match scoring of the eval tasks (docs/eval.md).
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "eval/tasks.hpp"

namespace flashkit::eval {

// A text task's score in [0, 1] for the greedy generation:
//  - one answer (passkey, niah_single, niah_multikey, mqar): 1 when the generation's first word -- after leading
//    spaces and punctuation, the longest run of letters, digits and '_' -- equals the answer, else 0;
//  - several answers (niah_multivalue, vt, cwe): the fraction of the answers that occur as words of the generation
//    (RULER's string_match_all, here on whole words so that "123" does not match "1234").
double score_text(const Sample& sample, const std::string& generation);

// Id-level mqar: the fraction of queries whose predicted id (predicted[i], the argmax after query key i) is the value.
double score_ids(const Sample& sample, std::span<const int32_t> predicted);

}  // namespace flashkit::eval
