// Umbrella header for the C++ API.
#pragma once
#include "flashkit/attention.hpp"
#include "flashkit/attention_fp8.hpp"
#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"
#include "flashkit/memory.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/tensor.hpp"
#include "flashkit/tuning.hpp"
