#include "train/data_parallel.hpp"

#include <algorithm>
#include <string>

#include "dist/memory.hpp"
#include "flashkit/error.hpp"

namespace flashkit::train {

int64_t zero1_shard_len(int64_t arena, int ranks) {
  if (ranks < 1) fail(Status::invalid_argument, "zero1_shard_len: ranks must be >= 1, got " + std::to_string(ranks));
  const int64_t per = (arena + ranks - 1) / ranks;
  return (per + 15) / 16 * 16;
}

Range zero1_shard(int64_t arena, int ranks, int rank) {
  if (rank < 0 || rank >= ranks)
    fail(Status::invalid_argument,
         "zero1_shard: rank must be in [0, " + std::to_string(ranks) + "), got " + std::to_string(rank));
  if (ranks == 1) return {0, arena};
  const int64_t len = zero1_shard_len(arena, ranks);
  return {std::min(arena, rank * len), std::min(arena, (rank + 1) * len)};
}

std::vector<Range> grad_buckets(int64_t arena, int64_t bucket) {
  if (bucket < 1) fail(Status::invalid_argument, "grad_buckets: bucket must be >= 1, got " + std::to_string(bucket));
  std::vector<Range> out;
  for (int64_t b = 0; b < arena; b += bucket) out.push_back({b, std::min(arena, b + bucket)});
  return out;
}

DataParallel::DataParallel(dist::Communicator& comm, Backend& be, int64_t arena, int64_t bucket)
    : comm_(comm), be_(be), arena_(arena) {
  shard_len_ = comm.size() == 1 ? arena : zero1_shard_len(arena, comm.size());
  shard_ = zero1_shard(arena, comm.size(), comm.rank());
  buckets_ = grad_buckets(arena, bucket > 0 ? bucket : kDefaultGradBucket);
  if (comm.size() > 1) gather_ = be.alloc(be.param_dtype(), 1, shard_len_ * comm.size());
}

DataParallel::~DataParallel() {
  if (!gather_.empty()) be_.free(gather_);
}

void DataParallel::before_comm() { be_.synchronize(); }
// NCCL enqueues on the legacy default stream, which a backend's non-blocking stream does not wait for.
void DataParallel::after_comm() { dist::wait_stream(nullptr); }

void DataParallel::all_reduce_grads(const Mat& grads) {
  if (size() == 1) return;
  before_comm();
  for (const Range& b : buckets_)
    comm_.all_reduce_sum(static_cast<float*>(grads.data) + b.begin, size_t(b.size()), DType::f32);
  after_comm();
}

void DataParallel::all_gather_params(const Mat& params) {
  if (size() == 1) return;
  if (shard_.size() > 0) be_.copy(gather_.view(shard_.begin, 1, shard_.size()), params.view(shard_.begin, 1, shard_.size()));
  before_comm();
  float* g = static_cast<float*>(gather_.data);
  comm_.all_gather(g + rank() * shard_len_, g, size_t(shard_len_), DType::f32);
  after_comm();
  be_.copy(params, gather_.view(0, 1, arena_));
}

void DataParallel::gather_shards(const Mat& shard, const Mat& whole) {
  if (size() == 1) {
    be_.copy(whole, shard);
    return;
  }
  if (shard_.size() > 0) be_.copy(gather_.view(rank() * shard_len_, 1, shard_.size()), shard.view(0, 1, shard_.size()));
  before_comm();
  float* g = static_cast<float*>(gather_.data);
  comm_.all_gather(g + rank() * shard_len_, g, size_t(shard_len_), DType::f32);
  after_comm();
  be_.copy(whole, gather_.view(0, 1, arena_));
}

void DataParallel::all_reduce_host(double* values, int n) {
  if (size() == 1) return;
  std::vector<float> f(values, values + n);
  comm_.all_reduce_sum(f.data(), size_t(n), DType::f32);
  for (int i = 0; i < n; ++i) values[i] = f[size_t(i)];
}

}  // namespace flashkit::train
