// The communicators' semantics: every collective for 1..4 thread ranks (and the single rank) on odd counts, f32
// and bf16, against sums computed here in rank order; bitwise equal results on every rank; bad arguments.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <thread>

#include "dist/comm.hpp"
#include "flashkit/error.hpp"

namespace fd = flashkit::dist;
using flashkit::DType;

namespace {

// Runs body(comm) on one thread per rank; rethrows the first failure.
void on_ranks(std::vector<std::unique_ptr<fd::Communicator>>& comms, const std::function<void(fd::Communicator&)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(comms.size());
  for (std::size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(*comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
        comms[r]->abort("test body threw");
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Rank r's random input (never zeros), as raw f32 or bf16 words.
std::vector<float> input_f32(int rank, std::size_t n) {
  std::mt19937 gen(1234 + rank);
  std::uniform_real_distribution<float> d(0.25f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (gen() & 1 ? 1 : -1) * d(gen);
  return v;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = flashkit::f32_to_bf16(v[i]);
  return h;
}

constexpr std::size_t kCounts[] = {1, 7, 1001};

}  // namespace

TEST(DistComm, SingleRankIsIdentity) {
  auto c = fd::make_single_rank();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_STREQ(c->kind(), "single");
  auto x = input_f32(0, 13), y = x;
  c->all_reduce_sum(y.data(), y.size(), DType::f32);
  EXPECT_EQ(x, y);
  std::vector<float> out(13, -7.f);
  c->reduce_scatter_sum(x.data(), out.data(), 13, DType::f32);
  EXPECT_EQ(out, x);
  std::fill(out.begin(), out.end(), -7.f);
  c->all_gather(x.data(), out.data(), 13, DType::f32);
  EXPECT_EQ(out, x);
  c->broadcast(y.data(), 13, DType::f32, 0);
  EXPECT_EQ(x, y);
  c->barrier();
}

class ThreadRanks : public ::testing::TestWithParam<int> {};

TEST_P(ThreadRanks, AllReduceSumsInRankOrderBitwiseOnEveryRank) {
  const int n = GetParam();
  for (std::size_t count : kCounts) {
    for (DType dt : {DType::f32, DType::bf16}) {
      std::vector<std::vector<float>> in(n);
      for (int r = 0; r < n; ++r) in[r] = input_f32(r, count);
      // The expected sum: f32 accumulator in rank order (bf16 inputs rounded first, the sum rounded once).
      std::vector<float> want(count);
      for (std::size_t i = 0; i < count; ++i) {
        float acc = 0;
        for (int r = 0; r < n; ++r)
          acc = r == 0 ? (dt == DType::f32 ? in[r][i] : flashkit::bf16_to_f32(flashkit::f32_to_bf16(in[r][i])))
                       : acc + (dt == DType::f32 ? in[r][i] : flashkit::bf16_to_f32(flashkit::f32_to_bf16(in[r][i])));
        want[i] = dt == DType::f32 ? acc : flashkit::bf16_to_f32(flashkit::f32_to_bf16(acc));
      }
      auto comms = fd::make_thread_ranks(n);
      std::vector<std::vector<float>> got(n);
      on_ranks(comms, [&](fd::Communicator& c) {
        const int r = c.rank();
        if (dt == DType::f32) {
          auto buf = in[r];
          c.all_reduce_sum(buf.data(), count, dt);
          got[r] = buf;
        } else {
          auto buf = to_bf16(in[r]);
          c.all_reduce_sum(buf.data(), count, dt);
          got[r].resize(count);
          for (std::size_t i = 0; i < count; ++i) got[r][i] = flashkit::bf16_to_f32(buf[i]);
        }
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(0, std::memcmp(got[r].data(), want.data(), count * 4)) << "rank " << r << " count " << count;
      }
    }
  }
}

TEST_P(ThreadRanks, ReduceScatterAndAllGatherOutOfPlaceAndInPlace) {
  const int n = GetParam();
  for (std::size_t count : kCounts) {
    for (bool in_place : {false, true}) {
      std::vector<std::vector<float>> in(n);
      for (int r = 0; r < n; ++r) in[r] = input_f32(r, count * n);
      auto comms = fd::make_thread_ranks(n);
      std::vector<std::vector<float>> scattered(n), gathered(n);
      on_ranks(comms, [&](fd::Communicator& c) {
        const int r = c.rank();
        auto send = in[r];
        std::vector<float> recv(count, -99.f);
        float* out = in_place ? send.data() + r * count : recv.data();
        c.reduce_scatter_sum(send.data(), out, count, DType::f32);
        scattered[r].assign(out, out + count);
        // Gather the scattered chunks back: every rank then holds the full reduced vector.
        std::vector<float> full(count * n, -99.f);
        if (in_place) {
          std::copy(out, out + count, full.begin() + r * count);
          c.all_gather(full.data() + r * count, full.data(), count, DType::f32);
        } else {
          c.all_gather(out, full.data(), count, DType::f32);
        }
        gathered[r] = full;
      });
      for (int r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < count; ++i) {
          float acc = in[0][r * count + i];
          for (int k = 1; k < n; ++k) acc += in[k][r * count + i];
          ASSERT_EQ(scattered[r][i], acc) << "rank " << r << " i " << i;
        }
        ASSERT_EQ(gathered[r], gathered[0]);
        for (int k = 0; k < n; ++k)
          ASSERT_TRUE(std::equal(scattered[k].begin(), scattered[k].end(), gathered[r].begin() + k * count));
      }
    }
  }
}

TEST_P(ThreadRanks, BroadcastFromEveryRoot) {
  const int n = GetParam();
  for (int root = 0; root < n; ++root) {
    auto comms = fd::make_thread_ranks(n);
    std::vector<std::vector<uint16_t>> got(n);
    on_ranks(comms, [&](fd::Communicator& c) {
      auto buf = to_bf16(input_f32(c.rank(), 7));
      c.broadcast(buf.data(), 7, DType::bf16, root);
      c.barrier();
      got[c.rank()] = buf;
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(got[r], to_bf16(input_f32(root, 7)));
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadRanks, ::testing::Values(1, 2, 3, 4));

TEST(DistComm, BadArgumentsAreNamed) {
  auto c = fd::make_single_rank();
  std::vector<float> x(4, 1.f);
  auto expect_error = [](const std::function<void()>& f, const char* needle) {
    try {
      f();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const flashkit::Error& e) {
      EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { c->all_reduce_sum(x.data(), 4, DType::f64); }, "dtype must be f32 or bf16");
  expect_error([&] { c->all_reduce_sum(nullptr, 4, DType::f32); }, "data is null");
  expect_error([&] { c->broadcast(x.data(), 4, DType::f32, 1); }, "root must be in [0, 1)");
  expect_error([&] { c->all_gather(nullptr, x.data(), 4, DType::f32); }, "send is null");
  expect_error([] { fd::make_thread_ranks(0); }, "n must be >= 1");
  auto comms = fd::make_thread_ranks(2);
  expect_error([&] { comms[0]->broadcast(x.data(), 4, DType::f32, 2); }, "root must be in [0, 2)");
}

TEST(DistComm, RanksThatDisagreeFailInsteadOfMixingBuffers) {
  auto comms = fd::make_thread_ranks(2);
  try {
    on_ranks(comms, [&](fd::Communicator& c) {
      std::vector<float> x(8, 1.f);
      c.all_reduce_sum(x.data(), c.rank() == 0 ? 8 : 5, DType::f32);
    });
    ADD_FAILURE() << "no error";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ranks disagree"), std::string::npos) << e.what();
  }
}

TEST(DistComm, AbortWakesPeersBlockedInACollective) {
  auto comms = fd::make_thread_ranks(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      try {
        if (r == 2) {
          comms[r]->abort("rank 2 failed");
          return;
        }
        std::vector<float> x(3, 1.f);
        comms[r]->all_reduce_sum(x.data(), 3, DType::f32);
      } catch (const flashkit::Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_NE(errors[r].find("aborted"), std::string::npos) << errors[r];
}

TEST(DistComm, NcclReportsNotBuiltWithoutIt) {
  if (fd::nccl_built()) GTEST_SKIP() << "built with NCCL (tests/dist/test_comm_nccl.cpp covers it)";
  try {
    fd::make_nccl(0, 1, 0, fd::NcclId{});
    ADD_FAILURE() << "no error";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("not built"), std::string::npos) << e.what();
  }
}
