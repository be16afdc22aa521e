// Replays the chat-template fuzz corpus (tests/data/fuzz/chat: inputs that crashed, hung or blew up memory
// under tests/fuzz/fuzz_chat_template.cpp, fixed since, plus hand-made hostile ones) under the regular
// compiler, exactly as the fuzzer runs them (tests/fuzz/chat_fuzz_input.hpp): each must render or raise
// flashkit::Error -- never crash or throw anything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "chat_fuzz_input.hpp"
#include "flashkit/error.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> inputs(const fs::path& dir, const std::string& ext = "") {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && (ext.empty() || e.path().extension() == ext)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST(ChatFuzzCorpus, EveryInputRendersOrRaisesFlashkitError) {
  const auto files = inputs(fs::path(FLASHKIT_TEST_DATA) / "fuzz" / "chat");
  ASSERT_FALSE(files.empty());
  for (const auto& p : files) {
    SCOPED_TRACE(p.filename().string());
    try {
      fk_fuzz::render_fuzz_template(slurp(p));
    } catch (const flashkit::Error& e) {
      EXPECT_NE(std::string(e.what()).find("chat template"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw a non-flashkit exception: " << e.what();
    }
  }
}

// The fuzzer's seeds: the real templates must render the fuzz conversation within the fuzz budget, so the
// limits are not what stops the fuzzer's mutations of them early.
TEST(ChatFuzzCorpus, RealTemplatesRenderTheFuzzConversation) {
  for (const auto& p : inputs(fs::path(FLASHKIT_TEST_DATA) / "chat", ".jinja")) {
    SCOPED_TRACE(p.filename().string());
    try {
      EXPECT_FALSE(fk_fuzz::render_fuzz_template(slurp(p)).empty());
    } catch (const flashkit::Error& e) {
      const std::string w = e.what();  // a template's own complaint (e.g. Gemma on the tool role) is fine
      for (const char* limit : {"budget exceeded", "limit exceeded", "nesting deeper"})
        EXPECT_EQ(w.find(limit), std::string::npos) << w;
    }
  }
}
