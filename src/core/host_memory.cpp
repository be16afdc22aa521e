#include "core/host_memory.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace flashkit {

namespace {

// The first unsigned number in a small file ("max" and unreadable files give nothing).
bool read_u64(const char* path, uint64_t* out) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s.empty() || s[0] < '0' || s[0] > '9') return false;
  *out = std::strtoull(s.c_str(), nullptr, 10);  // saturates at ULLONG_MAX
  return true;
}

uint64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return UINT64_MAX;
}

// A "key value" line of a cgroup memory.stat file.
uint64_t stat_value(const char* path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  uint64_t v = 0;
  while (f >> k >> v)
    if (k == key) return v;
  return 0;
}

uint64_t room(uint64_t limit, uint64_t used, uint64_t reclaimable) {
  used = used > reclaimable ? used - reclaimable : 0;  // inactive page cache is given back under pressure
  return limit > used ? limit - used : 0;
}

}  // namespace

uint64_t available_host_memory() {
  uint64_t avail = mem_available();
  uint64_t limit = 0, used = 0;
  if (read_u64("/sys/fs/cgroup/memory.max", &limit) && read_u64("/sys/fs/cgroup/memory.current", &used))
    avail = std::min(avail, room(limit, used, stat_value("/sys/fs/cgroup/memory.stat", "inactive_file")));
  else if (read_u64("/sys/fs/cgroup/memory/memory.limit_in_bytes", &limit) &&
           read_u64("/sys/fs/cgroup/memory/memory.usage_in_bytes", &used))  // v1; an unset limit is ~2^63
    avail = std::min(avail, room(limit, used, stat_value("/sys/fs/cgroup/memory/memory.stat", "total_inactive_file")));
  return avail;
}

}  // namespace flashkit
