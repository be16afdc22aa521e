// Token files (uint16 and uint32), the batch sampler, validation windows and the synthetic tasks' structure.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "flashkit/error.hpp"
#include "flashkit/train.hpp"
#include "train/data.hpp"
#include "train_test_util.hpp"

namespace {

using namespace fk_train_test;
namespace fs = std::filesystem;
namespace tr = flashkit::train;

TEST(TrainData, TokenFilesRoundTripInBothWidths) {
  const fs::path dir = temp_dir("data");
  for (int64_t vocab : {300, 65536, 70000}) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < 1001; ++i) ids.push_back(int32_t((i * 7919) % vocab));
    ids.push_back(int32_t(vocab - 1));
    tr::write_token_file(dir / "t.bin", ids, vocab);
    const tr::TokenFile f(dir / "t.bin");
    EXPECT_EQ(f.bytes_per_token(), vocab <= 65536 ? 2 : 4);
    EXPECT_EQ(f.vocab_size(), vocab);
    ASSERT_EQ(f.size(), int64_t(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(f.at(int64_t(i)), ids[i]);
    EXPECT_EQ(fs::file_size(dir / "t.bin"), 32 + ids.size() * size_t(f.bytes_per_token()));
  }
  fs::remove_all(dir);
}

TEST(TrainData, BatchesAreSeededShiftedWindows) {
  const fs::path dir = temp_dir("batch");
  std::vector<int32_t> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % 997);
  tr::write_token_file(dir / "t.bin", ids, 997);
  const tr::TokenFile f(dir / "t.bin");
  const int64_t B = 3, T = 17;
  std::vector<int32_t> a(B * T), at(B * T), b(B * T), bt(B * T);
  tr::sample_batch(f, 42, 7, 1, B, T, a.data(), at.data());
  tr::sample_batch(f, 42, 7, 1, B, T, b.data(), bt.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(at, bt);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(at[size_t(r * T + t)], (a[size_t(r * T + t)] + 1) % 997) << "targets are the next ids";
      if (t) EXPECT_EQ(a[size_t(r * T + t)], (a[size_t(r * T + t - 1)] + 1) % 997) << "contiguous windows";
    }
  tr::sample_batch(f, 42, 8, 1, B, T, b.data(), bt.data());
  EXPECT_NE(a, b) << "another step, other windows";
  tr::sample_batch(f, 43, 7, 1, B, T, b.data(), bt.data());
  EXPECT_NE(a, b) << "another seed, other windows";
  // validation: consecutive windows from the start
  tr::eval_batch(f, 0, B, T, a.data(), at.data());
  for (int64_t r = 0; r < B; ++r) EXPECT_EQ(a[size_t(r * T)], int32_t((r * T) % 997));
  fs::remove_all(dir);
}

TEST(TrainData, MqarExamplesAnswerTheirQueries) {
  const fs::path dir = temp_dir("mqar");
  tr::SyntheticOptions o;
  o.task = "mqar";
  o.vocab_size = 100;
  o.seq_len = 43;  // n = 10 pairs
  o.examples = 20;
  o.val_examples = 0;
  o.seed = 9;
  o.output_dir = dir;
  const auto r = tr::prepare_synthetic(o);
  const tr::TokenFile f(dir / "train.bin");
  EXPECT_EQ(r.train_tokens, f.size());
  const int32_t BOS = 97, SEP = 98, EOS = 99;
  int64_t pos = 0, examples = 0;
  while (pos < f.size()) {
    ASSERT_EQ(f.at(pos++), BOS);
    std::map<int32_t, int32_t> kv;
    while (f.at(pos) != SEP) {
      const int32_t k = f.at(pos), v = f.at(pos + 1);
      EXPECT_LT(k, 48);
      EXPECT_GE(v, 48);
      EXPECT_LT(v, 97);
      EXPECT_FALSE(kv.count(k)) << "distinct keys";
      kv[k] = v;
      pos += 2;
    }
    ++pos;
    EXPECT_EQ(kv.size(), 10u);
    for (size_t q = 0; q < kv.size(); ++q, pos += 2) EXPECT_EQ(f.at(pos + 1), kv.at(f.at(pos)));
    ASSERT_EQ(f.at(pos++), EOS);
    ++examples;
  }
  EXPECT_EQ(examples, 20);
  fs::remove_all(dir);
}

TEST(TrainData, MqarWithMorePairsThanKeysIsAnErrorNotAHang) {
  tr::SyntheticOptions o;
  o.task = "mqar";
  o.vocab_size = 64;  // 30 distinct keys
  o.seq_len = 128;    // 31 pairs: the key draw used to loop forever
  o.examples = 2;
  o.output_dir = temp_dir("mqar-keys");
  try {
    tr::prepare_synthetic(o);
    FAIL() << "expected an error";
  } catch (const flashkit::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--seq-len: 128 tokens hold 31 mqar pairs, more than the 30 distinct keys"), std::string::npos)
        << m;
    EXPECT_NE(m.find("at most --seq-len 126"), std::string::npos) << m;
  }
  o.seq_len = 126;  // 30 pairs: the largest that fits
  EXPECT_NO_THROW(tr::prepare_synthetic(o));
  fs::remove_all(o.output_dir);
}

}  // namespace

namespace {

// prepare_data's progress: called once per input file before it is tokenized, in order, with the file count.
TEST(TrainData, PrepareDataReportsProgressPerFile) {
  const fs::path dir = temp_dir("prepare_progress");
  fs::create_directories(dir / "corpus");
  for (const char* name : {"a.txt", "b.txt", "c.txt"}) std::ofstream(dir / "corpus" / name) << "In the beginning. " << name;
  tr::PrepareOptions po;
  po.tokenizer_dir = fs::path(FLASHKIT_TEST_DATA) / ".." / ".." / "models" / "tokenizer";
  po.inputs = {dir / "corpus"};  // a directory: its three files, sorted
  po.output_dir = dir / "tokens";
  std::vector<std::pair<int64_t, std::string>> calls;
  po.progress = [&](int64_t done, int64_t total, const fs::path& f) {
    EXPECT_EQ(total, 3);
    calls.emplace_back(done, f.filename().string());
  };
  const tr::PrepareResult r = tr::prepare_data(po);
  EXPECT_EQ(r.documents, 3);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t(0), std::string("a.txt")));
  EXPECT_EQ(calls[2], std::make_pair(int64_t(2), std::string("c.txt")));
  fs::remove_all(dir);
}

}  // namespace
