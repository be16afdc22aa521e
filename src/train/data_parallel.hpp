// Data-parallel training (docs/distributed.md): every rank runs the same model on its share of the global batch;
// the gradient arena is summed over the ranks in buckets; ZeRO-1 splits the AdamW moments so each rank keeps and
// updates one contiguous shard of the arena, after which the updated parameters are all-gathered.
// The split and the buckets are pure functions of the arena size (unit-tested: every element in exactly one shard).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/comm.hpp"
#include "train/arena.hpp"
#include "train/backend.hpp"

namespace flashkit::train {

struct Range {
  int64_t begin = 0, end = 0;  // [begin, end) of the arena, in elements
  int64_t size() const { return end - begin; }
};

// Every shard's length: the arena split into `ranks` equal parts, rounded up to 16 elements (64-byte aligned f32)
// so that all-gather gets equal counts; the last shards may be shorter (or empty) in the arena itself.
int64_t zero1_shard_len(int64_t arena, int ranks);
// Rank `rank`'s shard of the arena, clipped to it.
Range zero1_shard(int64_t arena, int ranks, int rank);
// Consecutive buckets of at most `bucket` elements covering [0, arena).
std::vector<Range> grad_buckets(int64_t arena, int64_t bucket);

// The default bucket: 4 Mi elements (16 MiB of f32), big enough for the bus bandwidth plateau, small enough to
// overlap with the backward of a layer (nccl-tests reach their busbw plateau from about 16 MiB).
constexpr int64_t kDefaultGradBucket = int64_t(4) << 20;

// The collectives of a data-parallel step on a backend's buffers. With one rank every call returns at once.
class DataParallel {
 public:
  // table: the parameter arena's entries (which layer each belongs to, for the overlapped all-reduce).
  DataParallel(dist::Communicator& comm, Backend& be, const ParamTable& table, int64_t bucket);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  dist::Communicator& comm() { return comm_; }
  // This rank's ZeRO-1 shard of the arena.
  Range shard() const { return shard_; }
  int64_t shard_len() const { return shard_len_; }
  // Sums the gradient arena over the ranks, bucket by bucket (every rank gets the same bits).
  void all_reduce_grads(const Mat& grads);
  // The same, overlapped with the last micro-batch's backward: begin_overlap() before it, layer_done(l) from the
  // model's hook when layer l's gradients are final (the buckets they complete are handed to a communication
  // thread, in the same order on every rank), finish_overlap() after it (the rest, then waits for every bucket).
  // No other collective may run between begin and finish: the communication thread owns the communicator then.
  void begin_overlap(const Mat& grads);
  void layer_done(int64_t layer);
  void finish_overlap();
  // Buckets all-reduced since begin_overlap() (for the tests: work done before finish_overlap()).
  std::size_t buckets_reduced();
  // After this rank updated its shard of params: every rank gets every shard.
  void all_gather_params(const Mat& params);
  // A moment arena: this rank's shard (shard_len() elements) -> the whole arena (arena elements) on every rank.
  void gather_shards(const Mat& shard, const Mat& whole);
  // Sums a few host doubles over the ranks (losses, counts), through f32.
  void all_reduce_host(double* values, int n);

 private:
  void before_comm();  // the backend's queued work is done before a collective reads its buffers
  void after_comm();   // the collective is done before the backend reads its result
  void complete_entry(std::size_t e);  // holds mu_
  void comm_loop();

  dist::Communicator& comm_;
  Backend& be_;
  int64_t arena_, shard_len_;
  Range shard_;
  std::vector<Range> buckets_;
  Mat gather_;  // shard_len * ranks elements for the all-gathers (more ranks only)

  // Overlap state: per table entry its layer (-1: embeddings, final norm, lm_head: final at the end) and the
  // buckets it touches; per bucket the entries not yet final.
  std::vector<int64_t> entry_layer_;
  std::vector<std::vector<std::size_t>> entry_buckets_;
  std::vector<int> bucket_entries_, pending_;
  float* grads_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::size_t> queue_;  // buckets ready to all-reduce
  std::size_t queued_ = 0, reduced_ = 0;
  bool stop_ = false;
  std::exception_ptr comm_error_;
  int device_ = 0;
  std::thread comm_thread_;
};

}  // namespace flashkit::train
