// File helpers of the trainer: atomic writes (temp file, fsync, rename, fsync of the directory), so a crash never
// leaves a half-written file under the final name; a 64-bit checksum for checkpoints.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace flashkit::train {

// Writes `data` to path atomically. Throws invalid_argument naming the path on failure.
void write_file_atomic(const std::filesystem::path& path, std::string_view data);
// Writes through a callback that appends chunks (for large files), atomically.
void write_file_atomic(const std::filesystem::path& path,
                       const std::function<void(const std::function<void(const void*, size_t)>&)>& produce);
void fsync_dir(const std::filesystem::path& dir);
std::string read_file(const std::filesystem::path& path, const std::string& what);

// FNV-1a, 64-bit, over bytes (checkpoint integrity; not cryptographic).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);
std::string hex64(uint64_t v);

}  // namespace flashkit::train
