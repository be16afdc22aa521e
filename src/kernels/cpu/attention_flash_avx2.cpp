// The CPU flash kernels compiled for one instruction set (avx2); see attention_flash.inc.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "core/convert.hpp"
#include "core/scratch.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cpu/attention_flash.hpp"
#include "kernels/reference/attention_row.hpp"

namespace flashkit::kernels::avx2 {
#include "kernels/cpu/simd_avx2.hpp"
#include "kernels/cpu/flash_tiles.inc"
#include "kernels/cpu/attention_flash.inc"
}  // namespace flashkit::kernels::avx2
