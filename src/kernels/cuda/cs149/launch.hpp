// CUDA launchers of the CS149 ops (one .cu file per kernel in this folder). They trust validated arguments
// (src/ops/cs149.cpp) and run on flashkit::cuda_stream(). In builds without CUDA they throw Status::unsupported
// (src/ops/cs149.cpp never calls them there).
#pragma once
#include "flashkit/cs149.hpp"

namespace flashkit::cs149::cuda {

void histogram(const HistogramArgs& a);
void swiglu(const SwigluArgs& a);
void rk4(const Rk4Args& a);
void layernorm_head(const LayerNormHeadArgs& a);
void query_embed(const QueryEmbedArgs& a);

}  // namespace flashkit::cs149::cuda
