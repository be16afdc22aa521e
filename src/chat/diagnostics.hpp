// Template positions and the one way template errors are raised: flashkit::Error(invalid_argument) with
// "chat template: <what> (line L, column C)".
#pragma once
#include <string>

namespace flashkit::chat::jinja {

struct Pos {
  int line = 1, col = 1;
};

[[noreturn]] void error_at(Pos p, const std::string& msg);

// "nesting deeper than N" at p: the error every depth limit (limits.hpp) raises.
[[noreturn]] void nesting_error(Pos p, int limit);

}  // namespace flashkit::chat::jinja
