// Hostile-input regressions of the checkpoint readers (harden-parse): GGUF tokenizer metadata of the wrong type,
// safetensors headers with very many entries (was quadratic) or deep nesting, non-finite weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "flashkit/dtype.hpp"
#include "gguf_builder.hpp"
#include "model/gguf.hpp"
#include "model/weights.hpp"

namespace fs = std::filesystem;
using namespace flashkit::model;

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const flashkit::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-flashkit exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

// ------------------------------------------------------------------ GGUF tokenizer metadata (fuzzer finding)

// tokens ["<s>", "a", "b"] and `key` set to a u32 scalar instead of an array.
std::string gguf_with_scalar(const std::string& key) {
  fk_test::GgufBuilder b;
  b.str("general.architecture", "llama").str("tokenizer.ggml.model", "gpt2");
  std::string toks;
  fk_test::put_u32(toks, 8);
  fk_test::put_u64(toks, 3);
  for (const char* t : {"<s>", "a", "b"}) fk_test::put_str(toks, t);
  b.raw("tokenizer.ggml.tokens", 9, toks).u32(key, 3);
  return b.build();
}

TEST(HardenGguf, TokenizerArraysOfTheWrongTypeAreAClearError) {
  for (const char* key : {"tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.merges"}) {
    SCOPED_TRACE(key);
    const std::string bytes = gguf_with_scalar(key);
    auto g = open_gguf_memory(bytes.data(), bytes.size(), "tok.gguf");
    const std::string m = error_of([&] { gguf_tokenizer_json(*g); });
    EXPECT_NE(m.find(std::string("'") + key + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("expected an array"), std::string::npos) << m;
  }
}

// ------------------------------------------------------------------ safetensors headers

// A header of n one-element F32 tensors (names t0..t{n-1}) and its data.
std::string many_tensors(size_t n) {
  std::string h = "{";
  for (size_t i = 0; i < n; ++i) {
    if (i) h += ',';
    h += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" + std::to_string(4 * i) +
         "," + std::to_string(4 * i + 4) + "]}";
  }
  h += "}";
  return le64(h.size()) + h + std::string(4 * n, '\0');
}

TEST(HardenSafetensors, TwoHundredThousandEntriesParseInLinearTime) {
  // The header used to be parsed with a callback, and nlohmann's callback parser rescans the parent object after
  // every child: 100k entries took ~60 s. Linear parsing takes well under a second in Release.
  // CPU time of this thread (the parse is single-threaded), so a busy machine does not fail the bound.
  auto cpu_now = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  const std::string bytes = many_tensors(200000);
  const double t0 = cpu_now();
  auto s = open_safetensors_memory(bytes.data(), bytes.size(), "many.safetensors");
  const double secs = cpu_now() - t0;
  EXPECT_EQ(s->names().size(), 200000u);
  EXPECT_EQ(s->get("t199999").nbytes, 4u);
  // The quadratic parse took ~4 minutes for 200k entries; unoptimized and AddressSanitizer builds (tools/sanitize.sh,
  // several times slower) get 20 s, which still tells linear from quadratic.
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(secs, 2.0) << "200k-entry header";
#else
  EXPECT_LT(secs, 20.0) << "200k-entry header (unoptimized or sanitizer build)";
#endif
}

TEST(HardenSafetensors, NestingDepthIsBoundedBeforeParsing) {
  auto nested = [](int depth) {
    return "{\"__metadata__\":{\"x\":" + std::string(size_t(depth), '[') + std::string(size_t(depth), ']') + "}}";
  };
  const std::string deep = nested(64), ok = nested(62);  // 2 object levels + the arrays
  const std::string bad_file = le64(deep.size()) + deep, ok_file = le64(ok.size()) + ok;
  const std::string m = error_of([&] { open_safetensors_memory(bad_file.data(), bad_file.size(), "deep.safetensors"); });
  EXPECT_NE(m.find("deep.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("nested deeper than 64"), std::string::npos) << m;
  EXPECT_EQ(open_safetensors_memory(ok_file.data(), ok_file.size(), "ok.safetensors")->names().size(), 0u);
  // 300,000 levels (the size of the reported crash) fail the same way, without recursing.
  const std::string huge = "{\"a\":" + std::string(300000, '[') + std::string(300000, ']') + "}";
  const std::string huge_file = le64(huge.size()) + huge;
  EXPECT_NE(error_of([&] { open_safetensors_memory(huge_file.data(), huge_file.size(), "h"); }).find("nested"),
            std::string::npos);
}

TEST(HardenCheckpoint, DeepConfigJsonIsRefused) {
  std::string tmpl = (fs::temp_directory_path() / "flashkit-harden-XXXXXX").string();
  const fs::path dir = ::mkdtemp(tmpl.data());
  fs::copy_file(fs::path(FLASHKIT_TEST_DATA) / "models/tiny-llama-bf16/model.safetensors", dir / "model.safetensors");
  std::ofstream(dir / "config.json") << "{\"model_type\": " << std::string(300000, '[') << std::string(300000, ']')
                                     << "}";
  const std::string m = error_of([&] { open_checkpoint(dir); });
  EXPECT_NE(m.find("config.json"), std::string::npos) << m;
  EXPECT_NE(m.find("nested deeper"), std::string::npos) << m;
  fs::remove_all(dir);
}

// ------------------------------------------------------------------ non-finite weights

WeightView view_of(WeightType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  WeightView w;
  w.name = "model.layers.0.mlp.down_proj.weight";
  w.type = t;
  w.shape = {rows, cols};
  w.data = bytes.data();
  w.nbytes = bytes.size();
  return w;
}

// Random finite values (never zeros) of type t, n elements, as stored bytes.
std::vector<uint8_t> random_bytes(WeightType t, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<uint8_t> b;
  if (t == WeightType::q8_0) {
    for (int64_t blk = 0; blk < n / 32; ++blk) {
      const uint16_t d = flashkit::f32_to_f16(0.01f + std::abs(u(rng)));
      b.push_back(uint8_t(d & 0xff));
      b.push_back(uint8_t(d >> 8));
      for (int j = 0; j < 32; ++j) b.push_back(uint8_t(int8_t(int(u(rng) * 40))));
    }
    return b;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = u(rng) + 0.001f;
    if (t == WeightType::f32) {
      uint8_t x[4];
      std::memcpy(x, &v, 4);
      b.insert(b.end(), x, x + 4);
    } else {
      const uint16_t h = t == WeightType::bf16 ? flashkit::f32_to_bf16(v) : flashkit::f32_to_f16(v);
      b.push_back(uint8_t(h & 0xff));
      b.push_back(uint8_t(h >> 8));
    }
  }
  return b;
}

void put(WeightType t, std::vector<uint8_t>& b, int64_t i, float v) {
  if (t == WeightType::f32) {
    std::memcpy(b.data() + 4 * i, &v, 4);
  } else if (t == WeightType::q8_0) {
    const uint16_t h = flashkit::f32_to_f16(v);
    std::memcpy(b.data() + 34 * (i / 32), &h, 2);
  } else {
    const uint16_t h = t == WeightType::bf16 ? flashkit::f32_to_bf16(v) : flashkit::f32_to_f16(v);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
}

TEST(HardenWeights, FirstNonFiniteFindsInfAndNanInEveryType) {
  std::mt19937 rng(7);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (WeightType t : {WeightType::f32, WeightType::bf16, WeightType::f16, WeightType::q8_0}) {
    const int64_t rows = 37, cols = t == WeightType::q8_0 ? 320 : 333;  // odd sizes; > one 4096 block
    const int64_t n = rows * cols;
    for (int trial = 0; trial < 6; ++trial) {
      SCOPED_TRACE(std::string(weight_type_name(t)) + " trial " + std::to_string(trial));
      auto b = random_bytes(t, n, rng);
      EXPECT_EQ(first_non_finite(view_of(t, b, rows, cols)), -1);
      EXPECT_NO_THROW(check_finite(view_of(t, b, rows, cols), "ckpt"));
      // Two bad values: the first one is reported (positions include the first and the last element).
      int64_t at = trial == 0 ? 0 : trial == 1 ? n - 1 : std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
      if (t == WeightType::q8_0) at = at / 32 * 32;
      const float bad = trial % 3 == 0 ? inf : trial % 3 == 1 ? -inf : nan;
      put(t, b, at, bad);
      if (at + 64 < n) put(t, b, at + 64, inf);
      EXPECT_EQ(first_non_finite(view_of(t, b, rows, cols)), at);
      const std::string m = error_of([&] { check_finite(view_of(t, b, rows, cols), "ckpt.safetensors"); });
      EXPECT_NE(m.find("ckpt.safetensors: tensor 'model.layers.0.mlp.down_proj.weight'"), std::string::npos) << m;
      EXPECT_NE(m.find(std::isnan(bad) ? "NaN" : bad > 0 ? "+inf" : "-inf"), std::string::npos) << m;
      EXPECT_NE(m.find("[" + std::to_string(at / cols) + ", " + std::to_string(at % cols) + "]"), std::string::npos)
          << m;
    }
  }
}

}  // namespace
