// Where a collective's buffer lives, and copies between any two of them. In CPU builds everything is host memory;
// in CUDA builds a pointer is device memory when cudaPointerGetAttributes says so, and copies touching device
// memory go through cudaMemcpyAsync on the caller's stream, then wait for it (the host reads the result next).
#pragma once
#include <cstddef>

namespace flashkit::dist {

bool is_device_pointer(const void* p);
// dst <- src (bytes); either may be device memory; overlapping host ranges are allowed (memmove).
void copy_bytes(void* dst, const void* src, std::size_t bytes, void* stream);
// Waits for the work queued on a CUDA stream (nullptr: the legacy default stream); nothing in CPU builds. Callers
// whose own stream does not synchronize with the collective's (cudaStreamNonBlocking) wait with this.
void wait_stream(void* stream);
// The calling thread's CUDA device, and setting it on another thread (0 and nothing in CPU builds).
int current_device();
void set_device(int device);
// Device memory on the current CUDA device (buffers an NCCL collective can read); throws device_error when the
// allocation fails and unsupported in CPU builds. device_free(nullptr) does nothing.
void* device_alloc(std::size_t bytes);
void device_free(void* p);
// Waits for all work on the current device (every stream); nothing in CPU builds.
void device_synchronize();

}  // namespace flashkit::dist
