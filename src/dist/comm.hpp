// The communication layer: collectives over the ranks of one job (tensor-parallel inference, data-parallel
// training). Three implementations behind one interface:
//   "single"  — one rank; every collective is the identity (or a copy), so every code path runs without peers.
//   "threads" — n ranks as threads of this process (CPU data-parallel training, the tests); host buffers, and in
//               CUDA builds device buffers too (staged through host memory).
//   "nccl"    — one process per GPU (src/dist/launch.hpp spawns them), device buffers; only when the library was
//               built with NCCL (nccl_built()).
// Every collective checks its arguments (dtype, null buffers, root) and throws flashkit::Error naming the one at
// fault; the implementations below trust the checked input.
#pragma once
#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "flashkit/dtype.hpp"

namespace flashkit::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* kind() const = 0;  // "single", "threads", "nccl"
  // Collectives over all ranks, in place where one buffer is given. dtype: f32 or bf16 (flashkit::DType).
  // Buffers: host memory for "single"/"threads" (and device memory too for "threads": it detects it with
  // cudaPointerGetAttributes and stages through host in CUDA builds), device memory for "nccl".
  // stream: the cudaStream_t to enqueue on (nccl and device buffers), nullptr otherwise.
  // Sums are deterministic: "threads" adds the ranks' contributions in rank order, so every rank gets bitwise
  // the same result.
  virtual void all_reduce_sum(void* data, std::size_t count, DType dtype, void* stream = nullptr) = 0;
  // send holds size() * recv_count elements; rank r receives the sum of every rank's elements
  // [r * recv_count, (r + 1) * recv_count). recv may be send + rank() * recv_count (in place).
  virtual void reduce_scatter_sum(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                  void* stream = nullptr) = 0;
  // recv holds size() * send_count elements: rank r's send lands at [r * send_count, ...). send may be
  // recv + rank() * send_count (in place).
  virtual void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype,
                          void* stream = nullptr) = 0;
  virtual void broadcast(void* data, std::size_t count, DType dtype, int root, void* stream = nullptr) = 0;
  virtual void barrier() = 0;

  // Added to the contract: a rank that fails calls abort() so that its peers, blocked in a collective, throw
  // instead of waiting forever ("threads"; "nccl" aborts the communicator; "single" has no peers).
  virtual void abort(const std::string& why) { (void)why; }
};

std::unique_ptr<Communicator> make_single_rank();
// n ranks as threads of this process; element r is rank r's communicator (each used by one thread).
std::vector<std::unique_ptr<Communicator>> make_thread_ranks(int n);
bool nccl_built();  // false when the library was built without NCCL

// ---- NCCL (one process per GPU) ----
// The opaque unique id rank 0 creates and every rank passes to make_nccl (ncclUniqueId's 128 bytes).
struct NcclId {
  std::array<char, 128> bytes{};
};
// A fresh id (rank 0 only). Throws Status::unsupported when !nccl_built().
NcclId nccl_unique_id();
// Exchange through a file: rank 0 creates the id and writes it to `path` atomically (temporary + rename); the
// other ranks wait up to timeout_s for it. Throws naming the path on timeout or a malformed file.
NcclId exchange_nccl_id(const std::string& path, int rank, double timeout_s = 60);
// Rank `rank` of `size` on CUDA device `device`. Throws Status::unsupported when !nccl_built(), invalid_argument
// for a bad rank / size / device (naming it).
std::unique_ptr<Communicator> make_nccl(int rank, int size, int device, const NcclId& id);

// Checks shared by every implementation (exposed for the tests): dtype is f32 or bf16, buffers are non-null
// when count > 0. `what` names the collective in the message.
void check_dtype(DType dtype, const char* what);
void check_buffer(const void* p, std::size_t count, const char* arg, const char* what);

}  // namespace flashkit::dist
