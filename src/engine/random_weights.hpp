// A WeightStore of seeded random weights for a ModelConfig: benchmarks and tests of models whose checkpoints are
// not in the repository (e.g. gemma-3-270m from models/configs). Values: uniform, scaled like an initializer
// (std ~0.02 for matrices, norm weights around 0 for Gemma's (1 + w) and around 1 otherwise).
#pragma once
#include <memory>

#include "engine/config.hpp"
#include "model/weights.hpp"

namespace flashkit::engine {

std::unique_ptr<model::WeightStore> make_random_weights(const ModelConfig& c, model::WeightType type, uint64_t seed);

}  // namespace flashkit::engine
