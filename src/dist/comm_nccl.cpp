// The NCCL communicator: one process per GPU, device buffers, collectives enqueued on the caller's stream.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "dist/comm.hpp"
#include "flashkit/error.hpp"

namespace flashkit::dist {
namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail(Status::device_error, std::string("NCCL ") + what + ": " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType d) { return d == DType::f32 ? ncclFloat32 : ncclBfloat16; }

class NcclRank final : public Communicator {
 public:
  NcclRank(int rank, int size, int device, const NcclId& id) : rank_(rank), size_(size), device_(device) {
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
      fail(Status::device_error, "make_nccl: cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(e));
    ncclUniqueId uid;
    static_assert(sizeof(uid.internal) == sizeof(id.bytes), "ncclUniqueId is 128 bytes");
    std::memcpy(uid.internal, id.bytes.data(), sizeof(uid.internal));
    check_nccl(ncclCommInitRank(&comm_, size, uid, rank), "ncclCommInitRank");
  }
  ~NcclRank() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "nccl"; }

  void all_reduce_sum(void* data, std::size_t count, DType dtype, void* stream) override {
    check_dtype(dtype, "all_reduce_sum");
    check_buffer(data, count, "data", "all_reduce_sum");
    check_nccl(ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, comm_, cuda_stream(stream)),
               "all_reduce_sum");
  }
  void reduce_scatter_sum(const void* send, void* recv, std::size_t recv_count, DType dtype,
                          void* stream) override {
    check_dtype(dtype, "reduce_scatter_sum");
    check_buffer(send, recv_count, "send", "reduce_scatter_sum");
    check_buffer(recv, recv_count, "recv", "reduce_scatter_sum");
    check_nccl(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), ncclSum, comm_, cuda_stream(stream)),
               "reduce_scatter_sum");
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, void* stream) override {
    check_dtype(dtype, "all_gather");
    check_buffer(send, send_count, "send", "all_gather");
    check_buffer(recv, send_count, "recv", "all_gather");
    check_nccl(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm_, cuda_stream(stream)), "all_gather");
  }
  void broadcast(void* data, std::size_t count, DType dtype, int root, void* stream) override {
    check_dtype(dtype, "broadcast");
    check_buffer(data, count, "data", "broadcast");
    if (root < 0 || root >= size_)
      fail(Status::invalid_argument,
           "broadcast: root must be in [0, " + std::to_string(size_) + "), got " + std::to_string(root));
    check_nccl(ncclBroadcast(data, data, count, nccl_type(dtype), root, comm_, cuda_stream(stream)), "broadcast");
  }
  // NCCL has no barrier: an all-reduce of one float on the device, waited for.
  void barrier() override {
    if (!scratch_) {
      cudaError_t e = cudaMalloc(&scratch_, sizeof(float));
      if (e != cudaSuccess) fail(Status::device_error, std::string("NCCL barrier: cudaMalloc: ") + cudaGetErrorString(e));
    }
    check_nccl(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, nullptr), "barrier");
    cudaError_t e = cudaStreamSynchronize(nullptr);
    if (e != cudaSuccess) fail(Status::device_error, std::string("NCCL barrier: ") + cudaGetErrorString(e));
  }
  void abort(const std::string&) override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  static cudaStream_t cuda_stream(void* s) { return static_cast<cudaStream_t>(s); }
  int rank_, size_, device_;
  ncclComm_t comm_ = nullptr;
  void* scratch_ = nullptr;
};

}  // namespace

bool nccl_built() { return true; }

NcclId nccl_unique_id() {
  ncclUniqueId uid;
  check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  NcclId id;
  std::memcpy(id.bytes.data(), uid.internal, sizeof(uid.internal));
  return id;
}

std::unique_ptr<Communicator> make_nccl(int rank, int size, int device, const NcclId& id) {
  if (size < 1) fail(Status::invalid_argument, "make_nccl: size must be >= 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size)
    fail(Status::invalid_argument,
         "make_nccl: rank must be in [0, " + std::to_string(size) + "), got " + std::to_string(rank));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices == 0) fail(Status::unsupported, "make_nccl: no CUDA device is visible");
  if (device < 0 || device >= devices)
    fail(Status::invalid_argument, "make_nccl: device must be in [0, " + std::to_string(devices) + "), got " +
                                       std::to_string(device));
  return std::make_unique<NcclRank>(rank, size, device, id);
}

}  // namespace flashkit::dist
