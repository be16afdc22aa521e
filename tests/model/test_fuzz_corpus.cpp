// Replays the fuzz corpus (tests/data/fuzz/{safetensors,gguf}: crashers found by tests/fuzz/run.sh, fixed since,
// and a few interesting inputs) through the readers under the regular compiler: each input must load or raise
// flashkit::Error -- never crash or throw anything else.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "flashkit/tokenizer.hpp"
#include "model/gguf.hpp"
#include "tokenizer/gguf_tokenizer.hpp"
#include "model/weights.hpp"

namespace fs = std::filesystem;
using namespace flashkit::model;

namespace {

const fs::path kFuzz = fs::path(FLASHKIT_TEST_DATA) / "fuzz";

std::vector<fs::path> inputs(const char* format) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kFuzz / format))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void touch_all(const WeightStore& s) {
  std::vector<float> buf;
  for (const auto& n : s.names()) {
    const auto& w = s.get(n);
    ASSERT_LE(w.numel(), int64_t(1) << 24) << n;  // corpus files are small: a bigger tensor would be a reader bug
    buf.resize(size_t(w.numel()));
    to_f32(w, buf.data());
  }
}

// Runs `f`; flashkit::Error is an accepted outcome, anything else escaping fails the test.
template <class F>
void load_or_error(const fs::path& p, F&& f) {
  try {
    f();
  } catch (const flashkit::Error& e) {
    EXPECT_FALSE(std::string(e.what()).empty()) << p;
  } catch (const std::exception& e) {
    ADD_FAILURE() << p << ": threw a non-flashkit exception: " << e.what();
  }
}

TEST(FuzzCorpus, Safetensors) {
  const auto files = inputs("safetensors");
  ASSERT_FALSE(files.empty());
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    const std::string bytes = slurp(p);
    load_or_error(p, [&] { touch_all(*open_safetensors_memory(bytes.data(), bytes.size(), p.filename().string())); });
    load_or_error(p, [&] { touch_all(*open_safetensors(p)); });  // the mmap path
  }
}

TEST(FuzzCorpus, Gguf) {
  const auto files = inputs("gguf");
  ASSERT_FALSE(files.empty());
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    const std::string bytes = slurp(p);
    load_or_error(p, [&] { read_gguf_header(bytes.data(), bytes.size(), p.filename().string()); });
    load_or_error(p, [&] {
      auto s = open_gguf_memory(bytes.data(), bytes.size(), p.filename().string());
      touch_all(*s);
      load_or_error(p, [&] { gguf_hf_config(*s); });
      load_or_error(p, [&] { gguf_tokenizer_json(*s); });
      // The embedded tokenizer as the engine builds it: synthesised tokenizer.json, then the real reader.
      load_or_error(p, [&] {
        auto [tj, cfg] = flashkit::tokenizer::gguf_tokenizer_files(gguf_metadata(*s), p.filename().string());
        flashkit::Tokenizer::from_json(tj, cfg);
      });
    });
    load_or_error(p, [&] { touch_all(*open_gguf(p)); });
  }
}

// The seeds are valid files: they must load fully, so the corpus is known to reach past the header checks.
TEST(FuzzCorpus, SeedsLoad) {
  for (const char* fmt : {"safetensors", "gguf"})
    for (const auto& p : inputs(fmt)) {
      if (p.filename().string().rfind("seed-", 0) != 0) continue;
      SCOPED_TRACE(p.string());
      if (std::string(fmt) == "safetensors") {
        EXPECT_NO_THROW(touch_all(*open_safetensors(p)));
      } else {
        auto s = open_gguf(p);
        touch_all(*s);
        if (s->find("model.embed_tokens.weight"))
          EXPECT_NO_THROW(gguf_hf_config(*s));
        else
          EXPECT_NO_THROW(gguf_tokenizer_json(*s));
      }
    }
}

}  // namespace
