// Runs a reference implementation under node (an npm package pinned in a tests/*/node directory and installed by
// tools/install-deps.sh) and reads back the JSON it writes. Shared by the tokenizer and GGUF reference tests.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace fk_test {

// Runs `node ARGS` in `dir`, with every "{out}" in ARGS replaced by a temporary file's path, and parses that file.
// Returns nullopt and sets *why when the package (dir/node_modules/PACKAGE) or node itself is missing, which
// callers treat as a skip, or when node fails, in which case *why starts with "FAIL" and callers fail.
inline std::optional<nlohmann::json> run_node_json(const std::filesystem::path& dir, const std::string& package,
                                                   std::string args, std::string* why) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir / "node_modules" / package)) {
    *why = package + " is absent: run `npm ci` in " + dir.string();
    return std::nullopt;
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    *why = "node is not installed";
    return std::nullopt;
  }
  static int serial = 0;
  const fs::path out =
      fs::temp_directory_path() / ("flashkit_node_" + std::to_string(::getpid()) + "_" + std::to_string(serial++) + ".json");
  for (size_t at; (at = args.find("{out}")) != std::string::npos;) args.replace(at, 5, "'" + out.string() + "'");
  const std::string cmd = "cd '" + dir.string() + "' && node " + args;
  if (std::system(cmd.c_str()) != 0) {
    *why = "FAIL: " + cmd;
    fs::remove(out);
    return std::nullopt;
  }
  std::ifstream f(out);
  nlohmann::json j = nlohmann::json::parse(f);
  fs::remove(out);
  return j;
}

}  // namespace fk_test
