#include "tokenizer/json_load.hpp"

#include "core/json_io.hpp"
#include "flashkit/error.hpp"

namespace flashkit::tok {

namespace {

using nlohmann::json;

class Handler : public nlohmann::json_sax<json> {
 public:
  explicit Handler(TokenizerJson& out) : out_(out) {}

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool b) override { return value(json(b)); }
  bool number_integer(number_integer_t v) override { return integer(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return integer(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool binary(binary_t&) override { return value(json()); }

  bool string(string_t& s) override {
    switch (mode_) {
      case Mode::merges: {  // "a b"
        size_t sp = s.empty() ? std::string::npos : s.find(' ', 1);
        if (sp == std::string::npos) return error("merge \"" + s + "\" is not two tokens separated by a space");
        out_.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        return true;
      }
      case Mode::merge_pair:
        if (pair_.size() >= 2) return error("a merge pair has more than two tokens");
        pair_.push_back(std::move(s));
        return true;
      case Mode::vocab: return error("model.vocab[\"" + key_ + "\"] is not an integer id");
      case Mode::tree: return value(json(std::move(s)));
    }
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::tree) return error(where() + " holds an unexpected object");
    if (in_model() && key_ == "vocab") {
      mode_ = Mode::vocab;
      out_.has_vocab = true;
      return true;
    }
    json* p = add(json::object());
    if (stack_.size() == 1 && key_ == "model") model_ = p;
    stack_.push_back(p);
    return true;
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::vocab) {
      mode_ = Mode::tree;
      key_.clear();
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::merges) {
      mode_ = Mode::merge_pair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::tree) return error(where() + " holds an unexpected array");
    if (in_model() && key_ == "merges") {
      mode_ = Mode::merges;
      out_.has_merges = true;
      return true;
    }
    stack_.push_back(add(json::array()));
    return true;
  }
  bool end_array() override {
    if (mode_ == Mode::merge_pair) {
      if (pair_.size() != 2) return error("a merge pair must be [\"a\", \"b\"]");
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::merges;
      return true;
    }
    if (mode_ == Mode::merges) {
      mode_ = Mode::tree;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    fail(Status::invalid_argument, "tokenizer.json: not valid JSON (byte " + std::to_string(pos) + "): " + e.what());
  }

 private:
  enum class Mode { tree, vocab, merges, merge_pair };

  bool in_model() const { return model_ && stack_.size() == 2 && stack_.back() == model_; }
  std::string where() const {
    return mode_ == Mode::vocab ? "model.vocab" : mode_ == Mode::tree ? "tokenizer.json" : "model.merges";
  }
  bool error(const std::string& m) { fail(Status::invalid_argument, "tokenizer.json: " + m); }
  bool integer(int64_t v) {
    if (mode_ == Mode::vocab) {
      out_.vocab.emplace_back(std::move(key_), v);
      return true;
    }
    if (mode_ != Mode::tree) return error(where() + " holds a number where a token string was expected");
    return value(json(v));
  }
  bool value(json v) {
    if (mode_ != Mode::tree) return error(where() + " holds an unexpected value");
    add(std::move(v));
    return true;
  }
  // Adds v to the open container (or as the root) and returns where it now lives.
  json* add(json v) {
    if (stack_.empty()) {
      out_.tree = std::move(v);
      return &out_.tree;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }

  TokenizerJson& out_;
  std::vector<json*> stack_;
  json* model_ = nullptr;
  std::string key_;
  Mode mode_ = Mode::tree;
  std::vector<std::string> pair_;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text) {
  // The tree and the pipeline parsers (Sequence inside Sequence) recurse per level: bound the depth first.
  json_io::check_depth(text, "tokenizer.json");
  TokenizerJson out;
  Handler h(out);
  json::sax_parse(text.begin(), text.end(), &h);
  return out;
}

}  // namespace flashkit::tok
