// The one-rank communicator: a sum over one rank is the rank's own data, a gather or scatter a copy.
#include "dist/comm.hpp"
#include "dist/memory.hpp"

#include <string>

#include "flashkit/error.hpp"

namespace flashkit::dist {

void check_dtype(DType dtype, const char* what) {
  if (dtype != DType::f32 && dtype != DType::bf16)
    fail(Status::invalid_argument, std::string(what) + ": dtype must be f32 or bf16, got " +
                                       std::string(dtype_name(dtype)));
}

void check_buffer(const void* p, std::size_t count, const char* arg, const char* what) {
  if (p == nullptr && count > 0)
    fail(Status::invalid_argument, std::string(what) + ": " + arg + " is null with " + std::to_string(count) +
                                       " elements");
}

namespace {

class SingleRank final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* kind() const override { return "single"; }
  void all_reduce_sum(void* data, std::size_t count, DType dtype, void*) override {
    check_dtype(dtype, "all_reduce_sum");
    check_buffer(data, count, "data", "all_reduce_sum");
  }
  void reduce_scatter_sum(const void* send, void* recv, std::size_t recv_count, DType dtype,
                          void* stream) override {
    check_dtype(dtype, "reduce_scatter_sum");
    check_buffer(send, recv_count, "send", "reduce_scatter_sum");
    check_buffer(recv, recv_count, "recv", "reduce_scatter_sum");
    copy_bytes(recv, send, recv_count * std::size_t(dtype_size(dtype)), stream);
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, void* stream) override {
    check_dtype(dtype, "all_gather");
    check_buffer(send, send_count, "send", "all_gather");
    check_buffer(recv, send_count, "recv", "all_gather");
    copy_bytes(recv, send, send_count * std::size_t(dtype_size(dtype)), stream);
  }
  void broadcast(void* data, std::size_t count, DType dtype, int root, void*) override {
    check_dtype(dtype, "broadcast");
    check_buffer(data, count, "data", "broadcast");
    if (root != 0)
      fail(Status::invalid_argument, "broadcast: root must be in [0, 1), got " + std::to_string(root));
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Communicator> make_single_rank() { return std::make_unique<SingleRank>(); }

}  // namespace flashkit::dist
