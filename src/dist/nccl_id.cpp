// The NCCL unique id's trip from rank 0 to the other ranks of one host: a file rank 0 writes atomically
// (temporary + rename, so a reader never sees half of it) and the others poll for.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "dist/comm.hpp"
#include "flashkit/error.hpp"

namespace flashkit::dist {

NcclId exchange_nccl_id(const std::string& path, int rank, double timeout_s) {
  if (path.empty()) fail(Status::invalid_argument, "exchange_nccl_id: path is empty");
  if (rank < 0) fail(Status::invalid_argument, "exchange_nccl_id: rank must be >= 0, got " + std::to_string(rank));
  NcclId id;
  if (rank == 0) {
    id = nccl_unique_id();
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.bytes.data(), std::streamsize(id.bytes.size()));
      if (!out) fail(Status::invalid_argument, "exchange_nccl_id: cannot write " + tmp);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) fail(Status::invalid_argument, "exchange_nccl_id: cannot rename " + tmp + " to " + path + ": " + ec.message());
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      const auto bytes = std::filesystem::file_size(path, ec);
      if (!ec && bytes != id.bytes.size())
        fail(Status::invalid_argument, "exchange_nccl_id: " + path + " holds " + std::to_string(bytes) +
                                           " bytes, expected " + std::to_string(id.bytes.size()));
      std::ifstream in(path, std::ios::binary);
      in.read(id.bytes.data(), std::streamsize(id.bytes.size()));
      if (in) return id;
    }
    if (std::chrono::steady_clock::now() > deadline)
      fail(Status::invalid_argument, "exchange_nccl_id: rank " + std::to_string(rank) + " waited " +
                                         std::to_string(timeout_s) + " s for rank 0 to write " + path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace flashkit::dist
