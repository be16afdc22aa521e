// StopMatcher: stop strings across token boundaries, held-back prefixes, stop tokens, trimming, UTF-8.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/stop.hpp"
#include "flashkit/error.hpp"

using flashkit::engine::StopMatcher;
using flashkit::engine::StopStep;

namespace {

struct FeedResult {
  std::vector<std::string> outs;  // text returned per push
  std::string text;               // everything emitted (including flush when not stopped)
  bool stopped = false;
  size_t steps = 0;  // pushes made before the stop
};

FeedResult feed(StopMatcher& m, const std::vector<std::string>& pieces, const std::vector<int32_t>& tokens = {}) {
  FeedResult r;
  for (size_t i = 0; i < pieces.size(); ++i) {
    StopStep s = tokens.empty() ? m.push_text(pieces[i]) : m.push(tokens[i], pieces[i]);
    r.outs.push_back(s.text);
    r.text += s.text;
    ++r.steps;
    if (s.stop) {
      r.stopped = true;
      return r;
    }
  }
  r.text += m.flush();
  return r;
}

}  // namespace

TEST(Stop, NoStopsPassesEverythingThrough) {
  StopMatcher m({}, {});
  auto r = feed(m, {"Hello", ",", " world", "!"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.outs, (std::vector<std::string>{"Hello", ",", " world", "!"}));
  EXPECT_EQ(r.text, "Hello, world!");
}

TEST(Stop, StopStringInsideOnePieceIsTrimmed) {
  StopMatcher m({"###"}, {});
  auto r = feed(m, {"abc", "de###fg", "never"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.steps, 2u);
  EXPECT_EQ(r.text, "abcde");
  EXPECT_EQ(m.matched_string(), std::optional<std::string>("###"));
  EXPECT_FALSE(m.matched_token().has_value());
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push_text("more").stop, true);
  EXPECT_EQ(m.flush(), "");
  EXPECT_EQ(m.emitted(), "abcde");
}

TEST(Stop, StopStringAcrossTokenBoundaries) {
  StopMatcher m({"\n\nUser:"}, {});
  auto r = feed(m, {"Sure", ".", "\n", "\n", "Us", "er", ":", " hi"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "Sure.");
  // "\n", "\n", "Us", "er" could all be the start of the stop string: nothing is emitted for them.
  EXPECT_EQ(r.outs, (std::vector<std::string>{"Sure", ".", "", "", "", "", ""}));
}

TEST(Stop, HeldPrefixIsReleasedWhenItDiverges) {
  StopMatcher m({"\n\nUser:"}, {});
  auto r = feed(m, {"a", "\n", "\n", "Use", "ful", " tip"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.outs, (std::vector<std::string>{"a", "", "", "", "\n\nUseful", " tip"}));
  EXPECT_EQ(r.text, "a\n\nUseful tip");
}

TEST(Stop, OnlyTheLongestPossiblePrefixIsHeld) {
  StopMatcher m({"aab"}, {});
  EXPECT_EQ(m.push_text("xa").text, "x");  // "a" may begin "aab"
  EXPECT_EQ(m.push_text("a").text, "");    // "aa"
  EXPECT_EQ(m.push_text("a").text, "a");   // "aaa": only "aa" can still begin "aab"
  EXPECT_EQ(m.held(), "aa");
  StopStep s = m.push_text("b");  // "aab"
  EXPECT_TRUE(s.stop);
  EXPECT_EQ(s.text, "");
  EXPECT_EQ(m.emitted(), "xa");
}

TEST(Stop, EarliestOfSeveralStopStringsWins) {
  {
    StopMatcher m({"END", "STOP"}, {});
    auto r = feed(m, {"one ST", "OP two END"});
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.text, "one ");
    EXPECT_EQ(m.matched_string(), std::optional<std::string>("STOP"));
  }
  {
    // One stop string is a prefix of another: the shorter one completes first and stops.
    StopMatcher m({"<end>", "<end_of_turn>"}, {});
    auto r = feed(m, {"x<e", "nd>", "_of_turn>"});
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.text, "x");
    EXPECT_EQ(m.matched_string(), std::optional<std::string>("<end>"));
  }
  {
    // Same start: the longer match is reported (the output is the same).
    StopMatcher m({"ab", "abc"}, {});
    auto r = feed(m, {"zabc"});
    EXPECT_EQ(r.text, "z");
    EXPECT_EQ(m.matched_string(), std::optional<std::string>("abc"));
  }
}

TEST(Stop, StopTokenStopsAndDropsItsText) {
  StopMatcher m({"\n\nUser:"}, {106, 1});
  auto r = feed(m, {"Hi", "\n", "<end_of_turn>", "after"}, {10, 11, 106, 12});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.steps, 3u);
  // The held "\n" was not a stop string: released with the stop.
  EXPECT_EQ(r.outs, (std::vector<std::string>{"Hi", "", "\n"}));
  EXPECT_EQ(r.text, "Hi\n");
  EXPECT_EQ(m.matched_token(), std::optional<int32_t>(106));
  EXPECT_FALSE(m.matched_string().has_value());
  EXPECT_TRUE(m.is_stop_token(1));
  EXPECT_FALSE(m.is_stop_token(2));
}

TEST(Stop, FlushReleasesHeldTextAndResetStartsOver) {
  StopMatcher m({"</s>"}, {});
  EXPECT_EQ(m.push_text("done <").text, "done ");
  EXPECT_EQ(m.push_text("/").text, "");
  EXPECT_EQ(m.flush(), "</");
  EXPECT_EQ(m.emitted(), "done </");
  m.reset();
  EXPECT_EQ(m.emitted(), "");
  auto r = feed(m, {"a</", "s>"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "a");
}

TEST(Stop, PartialUtf8IsHeldUntilComplete) {
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, 3 bytes
  StopMatcher m({}, {});
  EXPECT_EQ(m.push_text("a\xE2").text, "a");
  EXPECT_EQ(m.push_text("\x82").text, "");
  EXPECT_EQ(m.push_text("\xAC"
                        "b")
                .text,
            euro + "b");
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, 4 bytes
  EXPECT_EQ(m.push_text(emoji.substr(0, 3)).text, "");
  EXPECT_EQ(m.push_text(emoji.substr(3)).text, emoji);
  // Switched off, bytes pass straight through.
  StopMatcher raw({}, {}, false);
  EXPECT_EQ(raw.push_text("a\xE2").text, "a\xE2");
  // A multi-byte stop string split inside a character.
  StopMatcher u({"\xE2\x80\x94"}, {});  // em dash
  auto r = feed(u, {"x\xE2", "\x80", "\x94y"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "x");
}

TEST(Stop, EmptyStopStringRejected) { EXPECT_THROW(StopMatcher({"ok", ""}, {}), flashkit::Error); }

TEST(Stop, RandomSplitsMatchReference) {
  // Whatever the token boundaries, the output equals the text up to the earliest stop string, and the
  // emitted text never runs past it.
  std::mt19937 rng(17);
  const std::vector<std::string> stops = {"<|eot|>", "\n\nQ:", "ab"};
  const std::string alphabet = "<|eot>\nQ:abxy ";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const size_t len = 1 + rng() % 40;
    for (size_t i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    if (trial % 3 == 0) text.insert(rng() % (text.size() + 1), stops[rng() % stops.size()]);
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    const std::string want = first == std::string::npos ? text : text.substr(0, first);
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 4;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    StopMatcher m(stops, {});
    FeedResult r = feed(m, pieces);
    ASSERT_EQ(r.text, want) << "text=" << text;
    ASSERT_EQ(r.stopped, first != std::string::npos) << "text=" << text;
    // Held text is never longer than the longest stop string minus one.
    if (!r.stopped) {
      EXPECT_EQ(m.held(), "");
    }
  }
}
