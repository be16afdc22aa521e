// n ranks as threads of one process. Each collective is two meetings of the group: every rank publishes its
// input (a host pointer, or a host copy when the buffer is on the device or must not be read while its owner
// writes it), all meet, each rank computes its own output from the published inputs, all meet again so no input
// changes while a peer still reads it. Sums run in rank order with an f32 accumulator (bf16 rounded once at the
// end), so every rank computes bitwise the same result.
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

#include "dist/comm.hpp"
#include "dist/memory.hpp"
#include "flashkit/error.hpp"

namespace flashkit::dist {
namespace {

struct Call {  // what each rank asked for; all ranks must agree
  const char* what = "";
  std::size_t count = 0;
  DType dtype = DType::f32;
  int root = 0;
};

struct Group {
  explicit Group(int n) : n(n), inputs(n), calls(n), staged(n) {}
  const int n;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::string abort_reason;
  std::vector<const void*> inputs;                // published per collective
  std::vector<Call> calls;                        // published per collective
  std::vector<std::vector<unsigned char>> staged; // a rank's host copy of its input, when one is needed

  void meet() {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) fail(Status::internal, "threads communicator aborted: " + abort_reason);
    const uint64_t mine = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != mine || aborted; });
    if (generation == mine) fail(Status::internal, "threads communicator aborted: " + abort_reason);
  }
  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (!aborted) abort_reason = why;
    aborted = true;
    cv.notify_all();
  }
};

// out[i] = sum over ranks k in order of in[k][offset + i], for i < count.
void sum_in_rank_order(const std::vector<const void*>& in, std::size_t offset, void* out, std::size_t count,
                       DType dtype) {
  if (dtype == DType::f32) {
    auto* o = static_cast<float*>(out);
    for (std::size_t i = 0; i < count; ++i) {
      float acc = static_cast<const float*>(in[0])[offset + i];
      for (std::size_t k = 1; k < in.size(); ++k) acc += static_cast<const float*>(in[k])[offset + i];
      o[i] = acc;
    }
  } else {
    auto* o = static_cast<uint16_t*>(out);
    for (std::size_t i = 0; i < count; ++i) {
      float acc = bf16_to_f32(static_cast<const uint16_t*>(in[0])[offset + i]);
      for (std::size_t k = 1; k < in.size(); ++k) acc += bf16_to_f32(static_cast<const uint16_t*>(in[k])[offset + i]);
      o[i] = f32_to_bf16(acc);
    }
  }
}

class ThreadRank final : public Communicator {
 public:
  ThreadRank(std::shared_ptr<Group> group, int rank) : g_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->n; }
  const char* kind() const override { return "threads"; }

  void all_reduce_sum(void* data, std::size_t count, DType dtype, void* stream) override {
    check_dtype(dtype, "all_reduce_sum");
    check_buffer(data, count, "data", "all_reduce_sum");
    const std::size_t bytes = count * std::size_t(dtype_size(dtype));
    // Always a copy: this rank overwrites `data` while peers still read its contribution.
    publish(stage(data, bytes, stream), {"all_reduce_sum", count, dtype, 0});
    write_output(data, bytes, stream, [&](void* out) { sum_in_rank_order(g_->inputs, 0, out, count, dtype); });
    g_->meet();
  }

  void reduce_scatter_sum(const void* send, void* recv, std::size_t recv_count, DType dtype,
                          void* stream) override {
    check_dtype(dtype, "reduce_scatter_sum");
    check_buffer(send, recv_count, "send", "reduce_scatter_sum");
    check_buffer(recv, recv_count, "recv", "reduce_scatter_sum");
    const std::size_t esize = std::size_t(dtype_size(dtype));
    // A host send is read in place: peers read other ranks' chunks of it, this rank writes only its own chunk.
    const void* input = is_device_pointer(send) ? stage(send, recv_count * g_->n * esize, stream) : send;
    publish(input, {"reduce_scatter_sum", recv_count, dtype, 0});
    write_output(recv, recv_count * esize, stream, [&](void* out) {
      sum_in_rank_order(g_->inputs, std::size_t(rank_) * recv_count, out, recv_count, dtype);
    });
    g_->meet();
  }

  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, void* stream) override {
    check_dtype(dtype, "all_gather");
    check_buffer(send, send_count, "send", "all_gather");
    check_buffer(recv, send_count, "recv", "all_gather");
    const std::size_t bytes = send_count * std::size_t(dtype_size(dtype));
    const void* input = is_device_pointer(send) ? stage(send, bytes, stream) : send;
    publish(input, {"all_gather", send_count, dtype, 0});
    write_output(recv, bytes * g_->n, stream, [&](void* out) {
      for (int k = 0; k < g_->n; ++k) {
        void* dst = static_cast<char*>(out) + std::size_t(k) * bytes;
        if (dst != g_->inputs[k] && bytes) std::memmove(dst, g_->inputs[k], bytes);
      }
    });
    g_->meet();
  }

  void broadcast(void* data, std::size_t count, DType dtype, int root, void* stream) override {
    check_dtype(dtype, "broadcast");
    check_buffer(data, count, "data", "broadcast");
    if (root < 0 || root >= g_->n)
      fail(Status::invalid_argument,
           "broadcast: root must be in [0, " + std::to_string(g_->n) + "), got " + std::to_string(root));
    const std::size_t bytes = count * std::size_t(dtype_size(dtype));
    const void* input = (rank_ == root && is_device_pointer(data)) ? stage(data, bytes, stream) : data;
    publish(input, {"broadcast", count, dtype, root});
    if (rank_ != root) copy_bytes(data, g_->inputs[root], bytes, stream);
    g_->meet();
  }

  void barrier() override { g_->meet(); }
  void abort(const std::string& why) override { g_->abort("rank " + std::to_string(rank_) + ": " + why); }

 private:
  // This rank's host copy of `bytes` at p.
  const void* stage(const void* p, std::size_t bytes, void* stream) {
    auto& buf = g_->staged[rank_];
    buf.resize(bytes);
    copy_bytes(buf.data(), p, bytes, stream);
    return buf.data();
  }
  // Publishes this rank's input and call, meets, and checks that every rank made the same call.
  void publish(const void* input, const Call& call) {
    g_->inputs[rank_] = input;
    g_->calls[rank_] = call;
    g_->meet();
    const Call& first = g_->calls[0];
    for (int k = 1; k < g_->n; ++k) {
      const Call& c = g_->calls[k];
      if (std::strcmp(c.what, first.what) != 0 || c.count != first.count || c.dtype != first.dtype ||
          c.root != first.root)
        fail(Status::invalid_argument,
             std::string(call.what) + ": ranks disagree: rank 0 called " + first.what + "(count " +
                 std::to_string(first.count) + ", " + std::string(dtype_name(first.dtype)) + ", root " +
                 std::to_string(first.root) + "), rank " + std::to_string(k) + " called " + c.what + "(count " +
                 std::to_string(c.count) + ", " + std::string(dtype_name(c.dtype)) + ", root " +
                 std::to_string(c.root) + ")");
    }
  }
  // Runs fill(out) into `dst` directly when it is host memory, else into a host buffer copied to the device.
  template <class Fill>
  void write_output(void* dst, std::size_t bytes, void* stream, Fill fill) {
    if (!is_device_pointer(dst)) {
      fill(dst);
      return;
    }
    std::vector<unsigned char> host(bytes);
    fill(host.data());
    copy_bytes(dst, host.data(), bytes, stream);
  }

  std::shared_ptr<Group> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_ranks(int n) {
  if (n < 1) fail(Status::invalid_argument, "make_thread_ranks: n must be >= 1, got " + std::to_string(n));
  auto group = std::make_shared<Group>(n);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<ThreadRank>(group, r));
  return ranks;
}

}  // namespace flashkit::dist
