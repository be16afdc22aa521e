// Tuning inside the library: the public struct (flashkit/tuning.hpp) and how a call resolves the one it runs with.
// tuning_from_env() (tuning.cpp) is the only reader of the environment in src/.
#pragma once
#include <optional>

#include "flashkit/tuning.hpp"

namespace flashkit {

// The call's own Tuning when it passed one, else the process default.
inline Tuning resolve_tuning(const std::optional<Tuning>& t) { return t ? *t : default_tuning(); }

}  // namespace flashkit
