#include "core/json_io.hpp"

#include <fstream>
#include <sstream>

#include "flashkit/error.hpp"

namespace flashkit::json_io {

void check_depth(std::string_view text, const std::string& where, int max_depth) {
  int depth = 0;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '"') {  // skip the string: up to the closing quote that is not escaped
      for (++i; i < n && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        fail(Status::invalid_argument, where + ": JSON nested deeper than " + std::to_string(max_depth) +
                                           " levels (at byte " + std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

nlohmann::json parse(std::string_view text, const std::string& where, int max_depth) {
  check_depth(text, where, max_depth);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(Status::invalid_argument, where + ": invalid JSON (" + e.what() + ")");
  }
}

std::string read_file(const std::filesystem::path& path, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  const std::string p = path.string();
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) fail(Status::invalid_argument, p + ": no such file");
  // A FIFO or device named like a config file would block or never end: only regular files are read.
  if (!fs::is_regular_file(st)) fail(Status::invalid_argument, p + ": not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) fail(Status::invalid_argument, p + ": cannot read its size (" + ec.message() + ")");
  if (size > max_bytes)
    fail(Status::invalid_argument, p + ": " + std::to_string(size) + " bytes is more than the " +
                                       std::to_string(max_bytes) + " flashkit reads for this kind of file");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(Status::invalid_argument, p + ": cannot open");
  std::string out(size_t(size), '\0');
  f.read(out.data(), std::streamsize(size));
  out.resize(size_t(f.gcount()));  // a file that shrank meanwhile
  if (f.bad()) fail(Status::invalid_argument, p + ": read error");
  return out;
}

nlohmann::json read_json_file(const std::filesystem::path& path, uint64_t max_bytes, int max_depth) {
  return parse(read_file(path, max_bytes), path.string(), max_depth);
}

}  // namespace flashkit::json_io
