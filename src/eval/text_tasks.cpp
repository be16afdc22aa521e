// The text tasks of tasks.hpp: each is a builder of the prompt for n filler units (sentences, list words or pairs),
// with its needles drawn once per sample; fit_units() then finds the largest n whose prompt fits the length.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "eval/haystack.hpp"
#include "eval/tasks.hpp"
#include "flashkit/error.hpp"

namespace flashkit::eval {

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

struct Built {
  std::string prompt;
  std::vector<std::string> answers;
  bool all_answers = false;
};
using Builder = std::function<Built(int64_t units)>;

// Where a needle at `depth` goes among n units: before unit round(depth * n) (n: after the last).
int64_t slot(double depth, int64_t n) { return std::clamp<int64_t>(int64_t(std::llround(depth * double(n))), 0, n); }

// Filler sentences with needles: needles[i] goes before unit slots[i] (several at one slot keep their order).
std::string haystack(const std::vector<std::string>& sentences, int64_t n,
                     const std::vector<std::pair<int64_t, std::string>>& needles) {
  std::multimap<int64_t, std::string> at(needles.begin(), needles.end());
  std::string s;
  for (int64_t i = 0; i <= n; ++i) {
    auto [lo, hi] = at.equal_range(i);
    for (auto it = lo; it != hi; ++it) s += it->second;
    if (i < n) s += sentences[size_t(i)];
  }
  return s;
}

// Largest n in [0, cap] with |encode(build(n))| <= budget; the token count grows with n (more units, more text).
int64_t fit_units(const Builder& build, const Encoder& encode, int64_t budget, int64_t cap, const SampleSpec& spec,
                  int64_t answer) {
  auto tokens = [&](int64_t n) { return int64_t(encode(build(n).prompt).size()); };
  const int64_t empty = tokens(0);
  if (empty > budget)
    bad("--lengths: " + std::to_string(spec.length) + " tokens is too short for task " + spec.task +
        " (it needs at least " +
        std::to_string(empty + answer) + " tokens: the prompt without filler plus " + std::to_string(answer) +
        " for the answer)");
  // Estimate tokens per unit from 16 units, then bracket and bisect.
  const int64_t probe = std::min<int64_t>(16, cap);
  const double per_unit = probe > 0 ? std::max(1.0, double(tokens(probe) - empty) / double(probe)) : 1.0;
  int64_t lo = 0, hi = std::min(cap, int64_t(double(budget - empty) / per_unit) + 1);
  while (hi < cap && tokens(hi) <= budget) {
    lo = hi;
    hi = std::min(cap, hi * 2 + 1);
  }
  if (tokens(hi) <= budget) return hi;
  while (hi - lo > 1) {  // invariant: tokens(lo) <= budget < tokens(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (tokens(mid) <= budget ? lo : hi) = mid;
  }
  return lo;
}

// FNV-1a of the task name: stable across platforms (std::hash is not).
uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

constexpr int64_t kMaxSentences = int64_t(1) << 22;
const char* kFind = "There is important information hidden inside a lot of irrelevant text. Find it and memorize it.\n";

Builder passkey(Rng& rng, const SampleSpec& s, std::vector<std::string>& sentences) {
  const std::string key = random_number(rng, 5);
  return [key, &sentences, d = s.depth](int64_t n) {
    const std::string needle = "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
    return Built{std::string(kFind) + haystack(sentences, n, {{slot(d, n), needle}}) +
                     "\nWhat is the pass key? The pass key is",
                 {key}};
  };
}

std::string magic(const std::string& key, const std::string& value) {
  return "One of the special magic numbers for " + key + " is: " + value + ". ";
}

Builder niah(Rng& rng, const SampleSpec& s, std::vector<std::string>& sentences) {
  // single: one needle; multikey: the queried needle among 3 distractors with other keys (at seeded depths);
  // multivalue: 4 needles with the same key (the first at the depth), every value must be found.
  const bool multikey = s.task == "niah_multikey", multivalue = s.task == "niah_multivalue";
  const int64_t count = (multikey || multivalue) ? 4 : 1;
  const std::vector<std::string> keys = distinct_key_words(rng, multivalue ? 1 : count);
  std::vector<std::string> values;
  while (int64_t(values.size()) < count) {
    std::string v = random_number(rng, 7);
    if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
  }
  std::vector<double> depths = {s.depth};
  for (int64_t i = 1; i < count; ++i) depths.push_back(double(rng.below(1001)) / 1000.0);
  return [=, &sentences](int64_t n) {
    std::vector<std::pair<int64_t, std::string>> needles;
    for (int64_t i = 0; i < count; ++i)
      needles.push_back({slot(depths[size_t(i)], n), magic(keys[multivalue ? 0 : size_t(i)], values[size_t(i)])});
    const std::string& k = keys[0];
    Built b;
    b.prompt = std::string(kFind) + haystack(sentences, n, needles);
    if (multivalue) {
      b.prompt += "\nWhat are all the special magic numbers for " + k +
                  " mentioned in the provided text? The special magic numbers for " + k +
                  " mentioned in the provided text are";
      b.answers = values;
      b.all_answers = true;
    } else {
      b.prompt += "\nWhat is the special magic number for " + k + " mentioned in the provided text? The special magic "
                  "number for " + k + " mentioned in the provided text is";
      b.answers = {values[0]};
    }
    return b;
  };
}

Builder variable_tracking(Rng& rng, const SampleSpec& s, std::vector<std::string>& sentences) {
  // VAR A = 12345. VAR B = VAR A. ... (4 variables); the statements spread from the depth to the end, in order.
  std::vector<std::string> vars;
  while (vars.size() < 4) {
    std::string v = random_variable(rng);
    if (std::find(vars.begin(), vars.end(), v) == vars.end()) vars.push_back(v);
  }
  const std::string value = random_number(rng, 5);
  return [=, &sentences](int64_t n) {
    std::vector<std::pair<int64_t, std::string>> needles;
    for (size_t i = 0; i < vars.size(); ++i) {
      const double d = s.depth + (1.0 - s.depth) * double(i) / double(vars.size());
      needles.push_back({slot(d, n), "VAR " + vars[i] + " = " + (i ? "VAR " + vars[i - 1] : value) + ". "});
    }
    return Built{"Memorize and track the chain of variable assignments hidden in the following text.\n" +
                     haystack(sentences, n, needles) + "\nQuestion: Find all variables that are assigned the value " +
                     value + " in the text above. Answer: According to the chain of variable assignments in the text "
                     "above, 4 variables are assigned the value " + value + ", they are:",
                 vars, true};
  };
}

Builder common_words(Rng& rng, const SampleSpec&) {
  // A numbered list: 5 common words, each several times, among n other words (each once while the pool lasts).
  const auto& pool = cwe_words();
  std::vector<size_t> order(pool.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  const uint64_t shuffle_seed = rng.next();
  return [&pool, order, shuffle_seed](int64_t n) {
    const size_t rare_pool = pool.size() - 5;
    const int64_t rare_repeat = (n + int64_t(rare_pool) - 1) / int64_t(rare_pool);  // how often a rare word recurs
    const int64_t common_freq = std::max<int64_t>(4, 2 * rare_repeat + 2);
    std::vector<std::string> list;
    Built b;
    for (size_t c = 0; c < 5; ++c) {
      b.answers.push_back(pool[order[c]]);
      for (int64_t f = 0; f < common_freq; ++f) list.push_back(pool[order[c]]);
    }
    for (int64_t i = 0; i < n; ++i) list.push_back(pool[order[5 + size_t(i) % rare_pool]]);
    Rng shuffle(shuffle_seed);
    for (size_t i = list.size() - 1; i > 0; --i) std::swap(list[i], list[shuffle.below(i + 1)]);
    b.prompt = "Below is a numbered list of words. Some of them appear more often than the others. Memorize the ones "
               "that appear most often.\n";
    for (size_t i = 0; i < list.size(); ++i) b.prompt += std::to_string(i + 1) + ". " + list[i] + " ";
    b.prompt += "\nQuestion: What are the 5 most common words in the list above? Answer: The 5 words that appear most "
                "often in the list are:";
    b.all_answers = true;
    return b;
  };
}

Builder word_recall(Rng& rng, const SampleSpec& s) {
  // Associative recall in words: n "key: value" lines, then three answered queries and the scored one, whose pair
  // sits at the depth of the list.
  const auto& pool = cwe_words();
  std::vector<size_t> order(pool.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  std::vector<std::string> values;
  for (size_t i = 0; i < pool.size(); ++i) values.push_back(random_number(rng, 3));
  const uint64_t pick_seed = rng.next();
  return [&pool, order, values, pick_seed, d = s.depth](int64_t n) {
    const int64_t pairs = n + 4;  // at least the 4 queried pairs
    std::string p = "Here is a list of keys and their values. Memorize them.\n";
    for (int64_t i = 0; i < pairs; ++i) p += pool[order[size_t(i)]] + ": " + values[size_t(i)] + "\n";
    const int64_t target = std::clamp<int64_t>(int64_t(std::llround(d * double(pairs - 1))), 0, pairs - 1);
    Rng pick(pick_seed);
    std::vector<int64_t> shown;
    while (shown.size() < 3) {
      const int64_t q = int64_t(pick.below(uint64_t(pairs)));
      if (q != target && std::find(shown.begin(), shown.end(), q) == shown.end()) shown.push_back(q);
    }
    p += "Queries:\n";
    for (int64_t q : shown) p += pool[order[size_t(q)]] + ": " + values[size_t(q)] + "\n";
    p += pool[order[size_t(target)]] + ":";
    return Built{p, {values[size_t(target)]}};
  };
}

}  // namespace

Sample make_text_sample(const SampleSpec& spec, const Encoder& encode) {
  if (!is_task(spec.task)) bad("--task: unknown task \"" + spec.task + "\"");
  if (task_has_depth(spec.task) && !(spec.depth >= 0 && spec.depth <= 1))
    bad("--depths: a depth must be in [0, 1], got " + std::to_string(spec.depth));
  Rng rng(mix_seed(spec.seed, name_hash(spec.task), uint64_t(spec.length),
                   uint64_t(std::llround(spec.depth * 1e6)), uint64_t(spec.index)));
  // One haystack per (seed, length), as RULER's: samples, depths and tasks differ in their needles, not in the text
  // around them, so a serving engine's prefix cache computes the haystack before the needle once (docs/eval.md).
  const uint64_t filler_seed = mix_seed(spec.seed, uint64_t(spec.length));
  std::vector<std::string> sentences;
  Builder build;
  int64_t cap = kMaxSentences;
  if (spec.task == "passkey") build = passkey(rng, spec, sentences);
  else if (spec.task == "vt") build = variable_tracking(rng, spec, sentences);
  else if (spec.task == "cwe") build = common_words(rng, spec);
  else if (spec.task == "mqar") build = word_recall(rng, spec), cap = int64_t(cwe_words().size()) - 4;
  else build = niah(rng, spec, sentences);
  const int64_t answer = answer_budget(spec.task);
  const int64_t budget = spec.length - answer;
  // Sentences: enough for any fit (a sentence is at least one token), drawn once and shared by every probe.
  const bool uses_sentences = spec.task != "cwe" && spec.task != "mqar";
  if (uses_sentences) sentences = filler_sentences(filler_seed, std::min(cap, std::max<int64_t>(budget, 16)));
  if (uses_sentences) cap = int64_t(sentences.size());
  const int64_t n = fit_units(build, encode, budget, cap, spec, answer);
  Built b = build(n);
  Sample out;
  out.task = spec.task;
  out.length = spec.length;
  out.depth = task_has_depth(spec.task) ? spec.depth : -1;
  out.ids = encode(b.prompt);
  out.prompt = std::move(b.prompt);
  out.answers = std::move(b.answers);
  out.all_answers = b.all_answers;
  out.max_new_tokens = answer;
  return out;
}

}  // namespace flashkit::eval
