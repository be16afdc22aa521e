#include "train/io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "flashkit/error.hpp"

namespace flashkit::train {

namespace fs = std::filesystem;

namespace {
[[noreturn]] void io_fail(const fs::path& p, const std::string& what) {
  fail(Status::invalid_argument, p.string() + ": " + what + " (" + std::strerror(errno) + ")");
}
}  // namespace

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some filesystems do not allow it
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomic(const fs::path& path,
                       const std::function<void(const std::function<void(const void*, size_t)>&)>& produce) {
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) io_fail(tmp, "cannot create");
  bool ok = true;
  produce([&](const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (ok && n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        ok = false;
        break;
      }
      p += w;
      n -= size_t(w);
    }
  });
  if (!ok || ::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = e;
    io_fail(path, "write failed");
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    io_fail(path, "cannot rename the temporary file into place");
  }
  fsync_dir(path.parent_path());
}

void write_file_atomic(const fs::path& path, std::string_view data) {
  write_file_atomic(path, [&](const std::function<void(const void*, size_t)>& put) { put(data.data(), data.size()); });
}

std::string read_file(const fs::path& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(Status::invalid_argument, path.string() + ": cannot read " + what);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  // 8 independent lanes folded at the end would be faster; one lane keeps it obviously FNV-1a.
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace flashkit::train
