// CPU kernels of the CS149 ops (include/flashkit/cs149.hpp). They trust validated arguments (src/ops/cs149.cpp).
#pragma once
#include "flashkit/cs149.hpp"

namespace flashkit::cs149::cpu {

void histogram(const HistogramArgs& a);
void swiglu(const SwigluArgs& a);
void rk4(const Rk4Args& a);
void layernorm_head(const LayerNormHeadArgs& a);
void query_embed(const QueryEmbedArgs& a);

}  // namespace flashkit::cs149::cpu
