// flashkit tokenize | detokenize: the tokenizer of a Hugging Face model directory (src/tokenizer).
//   flashkit tokenize -m DIR|tokenizer.json [--add-special] [--json] TEXT     token ids of TEXT (space separated, or a JSON array)
//   flashkit tokenize -m DIR --file PATH                        ids of a file's text ("-": standard input)
//   flashkit detokenize -m DIR [--skip-special] ID...           text of the ids (also "[1, 2]" or "1,2")
// DIR needs only tokenizer.json (tokenizer_config.json is read when present).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_checks.hpp"
#include "commands.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"

namespace flashkit::cli {

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

// Ids from arguments: "1 2 3", "1,2,3" or a JSON array, possibly split over several arguments.
std::vector<int32_t> parse_ids(const std::vector<std::string>& args) {
  std::string all;
  for (const auto& a : args) all += a + " ";
  std::vector<int32_t> ids;
  std::string tok;
  auto flush = [&] {
    if (tok.empty()) return;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || v < INT32_MIN || v > INT32_MAX) bad("detokenize: \"" + tok + "\" is not a token id");
    ids.push_back(static_cast<int32_t>(v));
    tok.clear();
  };
  for (char c : all) {
    if (c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '[' || c == ']') flush();
    else tok += c;
  }
  flush();
  return ids;
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  struct Opts {
    std::string dir, text, file;
    bool add_special = false, json = false, skip_special = false, time = false;
    std::vector<std::string> ids;
  };
  auto o = std::make_shared<Opts>();

  auto* tok = app.add_subcommand("tokenize", "Token ids of a text with a model's tokenizer.json");
  tok->add_option("-m,--model", o->dir, "Model or tokenizer directory (holding tokenizer.json), or a tokenizer.json file")->required();
  tok->add_option("text", o->text, "Text to tokenize (UTF-8)");
  tok->add_option("-f,--file", o->file, "Tokenize the contents of this file instead (\"-\": standard input)");
  tok->add_flag("--add-special", o->add_special, "Add what the tokenizer's post-processor adds (e.g. BOS)");
  tok->add_flag("--json", o->json, "Print one JSON array of integers");
  tok->add_flag("--time", o->time, "Report load and encode time on stderr");
  tok->callback([o, tok] {
    bool have_text = tok->count("text") > 0, have_file = !o->file.empty();
    if (have_text == have_file) bad("tokenize: give either TEXT or --file (exactly one)");
    auto t0 = std::chrono::steady_clock::now();
    auto t = Tokenizer::from_dir(tokenizer_dir(o->dir, "-m/--model"));
    auto t1 = std::chrono::steady_clock::now();
    std::string text = have_file ? read_text_file(o->file, "--file") : o->text;
    auto ids = t.encode(text, o->add_special);
    auto t2 = std::chrono::steady_clock::now();
    std::string out;
    if (o->json) {
      out = nlohmann::json(ids).dump();
    } else {
      for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
    }
    std::cout << out << "\n";
    check_written(std::cout, "the ids to standard output");
    if (o->time) {
      double load = std::chrono::duration<double>(t1 - t0).count(), enc = std::chrono::duration<double>(t2 - t1).count();
      std::fprintf(stderr, "load %.3f s, encode %.3f s (%zu bytes, %zu ids, %.2f MB/s)\n", load, enc, text.size(),
                   ids.size(), enc > 0 ? static_cast<double>(text.size()) / enc / 1e6 : 0.0);
    }
  });

  auto* det = app.add_subcommand("detokenize", "Text of token ids with a model's tokenizer.json");
  det->add_option("-m,--model", o->dir, "Model or tokenizer directory (holding tokenizer.json), or a tokenizer.json file")->required();
  det->add_option("ids", o->ids, "Token ids: \"1 2 3\", \"1,2,3\" or a JSON array")->required();
  det->add_flag("--skip-special", o->skip_special, "Leave out special tokens (BOS, EOS, turn markers)");
  det->callback([o] {
    auto ids = parse_ids(o->ids);
    auto t = Tokenizer::from_dir(tokenizer_dir(o->dir, "-m/--model"));
    std::cout << t.decode(ids, o->skip_special) << "\n";
  });
}

}  // namespace flashkit::cli
