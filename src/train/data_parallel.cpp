#include "train/data_parallel.hpp"

#include <algorithm>
#include <cstdlib>
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

DataParallel::DataParallel(dist::Communicator& comm, Backend& be, const ParamTable& table, int64_t bucket)
    : comm_(comm), be_(be), arena_(table.size()) {
  shard_len_ = comm.size() == 1 ? arena_ : zero1_shard_len(arena_, comm.size());
  shard_ = zero1_shard(arena_, comm.size(), comm.rank());
  buckets_ = grad_buckets(arena_, bucket > 0 ? bucket : kDefaultGradBucket);
  if (comm.size() == 1) return;
  gather_ = be.alloc(be.param_dtype(), 1, shard_len_ * comm.size());
  const int64_t blen = buckets_.front().size();
  bucket_entries_.assign(buckets_.size(), 0);
  for (const ParamEntry& e : table.entries()) {
    // "model.layers.3.mlp..." / "backbone.layers.3...": layer 3; anything else is final only at the end.
    int64_t layer = -1;
    const auto at = e.name.find(".layers.");
    if (at != std::string::npos) layer = std::atoll(e.name.c_str() + at + 8);
    entry_layer_.push_back(layer);
    std::vector<std::size_t> touched;
    if (e.numel() > 0)
      for (int64_t b = e.offset / blen; b <= (e.offset + e.numel() - 1) / blen; ++b) touched.push_back(std::size_t(b));
    for (std::size_t b : touched) ++bucket_entries_[b];
    entry_buckets_.push_back(std::move(touched));
  }
}

DataParallel::~DataParallel() {
  if (comm_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    comm_thread_.join();
  }
  if (!gather_.empty()) be_.free(gather_);
}

void DataParallel::begin_overlap(const Mat& grads) {
  if (size() == 1) return;
  before_comm();
  if (!comm_thread_.joinable()) {
    device_ = dist::current_device();
    comm_thread_ = std::thread([this] { comm_loop(); });
  }
  std::lock_guard<std::mutex> lock(mu_);
  grads_ = static_cast<float*>(grads.data);
  pending_ = bucket_entries_;
  queued_ = reduced_ = 0;
  comm_error_ = nullptr;
  for (std::size_t b = 0; b < pending_.size(); ++b)  // buckets of padding only
    if (pending_[b] == 0) queue_.push_back(b), ++queued_;
  cv_.notify_all();
}

void DataParallel::complete_entry(std::size_t e) {
  for (std::size_t b : entry_buckets_[e])
    if (--pending_[b] == 0) queue_.push_back(b), ++queued_;
}

void DataParallel::layer_done(int64_t layer) {
  if (size() == 1) return;
  before_comm();  // the layer's gradients are in memory before the communication thread reads them
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t e = 0; e < entry_layer_.size(); ++e)
    if (entry_layer_[e] == layer) complete_entry(e);
  cv_.notify_all();
}

void DataParallel::finish_overlap() {
  if (size() == 1) return;
  before_comm();
  std::unique_lock<std::mutex> lock(mu_);
  for (std::size_t e = 0; e < entry_layer_.size(); ++e)
    if (entry_layer_[e] < 0) complete_entry(e);
  cv_.notify_all();
  cv_.wait(lock, [&] { return reduced_ == buckets_.size() || comm_error_; });
  if (comm_error_) {
    auto err = comm_error_;
    comm_error_ = nullptr;
    queue_.clear();
    std::rethrow_exception(err);
  }
  grads_ = nullptr;
}

std::size_t DataParallel::buckets_reduced() {
  std::lock_guard<std::mutex> lock(mu_);
  return reduced_;
}

// The communication thread: all-reduces ready buckets in the order they became ready (the same on every rank:
// every rank runs the same backward schedule).
void DataParallel::comm_loop() {
  dist::set_device(device_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Range b = buckets_[queue_.front()];
    queue_.pop_front();
    float* g = grads_;
    lock.unlock();
    std::exception_ptr err;
    try {
      comm_.all_reduce_sum(g + b.begin, size_t(b.size()), DType::f32);
      after_comm();
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    if (err && !comm_error_) comm_error_ = err;
    ++reduced_;
    cv_.notify_all();
  }
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
