// Tuning: every knob that picks a kernel path or a resource limit, as one value passed down to the code that uses
// it. The environment (FLASHKIT_*, listed in the README) is read in one place only, tuning_from_env(), at a front
// end's boundary (the CLI, the C API, Python); library code never reads it. A call that wants other settings
// passes its own Tuning (AttentionOptions::tuning, LoadOptions::tuning); calls that pass none use the process
// default, which is tuning_from_env() unless set_default_tuning() replaced it.
#pragma once
#include <cstdint>

namespace flashkit {

// The widest SIMD level CPU kernels may use; they use min(this, what the CPU supports).
enum class CpuIsaCap : int32_t { scalar = 0, avx2 = 1, avx512 = 2 };

// How idle CPU worker threads wait for work: passive (sleep at once) or active (spin first). Spinning wins a few
// microseconds per parallel region on an idle machine but loses the core to another busy process: on the 2-core
// development machine with one competing process decode fell from 67.7 to 1.7 tokens/s (bench/results/cpu-contention.md).
enum class CpuWait : int32_t { passive = 0, active = 1 };

// Split-merge placement of the library's CUDA decode attention.
enum class DecodeCombine : int32_t {
  automatic = 0,  // the separate combine launch (measured fastest, attention-cuda.md v10)
  kernel = 1,     // the separate combine launch, always
  cluster = 2,    // thread-block clusters merging in distributed shared memory where the wave model allows (sm_90)
  last = 3,       // where the automatic choice launches the combine: the last CTA of each tile merges in the kernel
};

// Split-merge placement of the engine's fused decode attention.
enum class EngineDecodeMerge : int32_t {
  automatic = 0,  // a cluster where the device allows and the heads leave room (engine-cuda.md v6)
  global = 1,     // always the last-block (counter) merge through global memory
  cluster = 2,    // a cluster wherever the device allows, however many heads
};

struct Tuning {
  // ---- CPU (library and engine)
  CpuIsaCap cpu_isa = CpuIsaCap::avx512;  // FLASHKIT_CPU_ISA=scalar|avx2|avx512
  int num_threads = 0;                    // FLASHKIT_NUM_THREADS (1..4096); 0: OpenMP's default
  int64_t max_workspace_bytes = 0;        // FLASHKIT_MAX_WORKSPACE_BYTES; 0: 80% of physical memory
  CpuWait cpu_wait = CpuWait::passive;    // FLASHKIT_CPU_WAIT=passive|active (see omp_wait_policy_env())
  bool omp_wait_set = false;              // OMP_WAIT_POLICY or GOMP_SPINCOUNT is set: OpenMP's own setting wins
  bool omp_wait_passive = false;          // OMP_WAIT_POLICY=passive: the policy OpenMP runs with (flashkit info)

  // ---- CUDA attention (library op)
  bool sm90 = true;                 // FLASHKIT_SM90=0: the portable sm_80 kernels on Hopper too
  int sm90_fwd_config = 0;          // FLASHKIT_SM90_CFG=1..3 forces a Hopper forward configuration (3: ws kernel)
  bool sm90_ws_pingpong = true;     // FLASHKIT_SM90_WS_PINGPONG=0: consumer warpgroups issue freely
  int sm90_ws_bn = 0;               // FLASHKIT_SM90_WS_BN=128|176|192: the ws kernel's key tile (d128: 128|176,
                                    // d64: 128|192; A/B runs); 0: auto
  int sm90_ws_persist = -1;         // FLASHKIT_SM90_WS_PERSIST: -1 the choice's; 0 one ws CTA per tile; N > 0 a
                                    // persistent ws grid of at most N CTAs (and at most one per SM)
  int sm90_ws_overlap = -1;         // FLASHKIT_SM90_WS_OVERLAP=auto|0|1|2: the persistent ws grid writes a tile's
                                    // O under the next tile's first product (v23), with 2 by TMA stores from one
                                    // thread (v23b) -- auto (-1): 2 up to 2k query rows, where it measured +1-4%
                                    // (run s15-5), v19's order (0) beyond (-3% to -9% from 4k); 1 and 2 force it
                                    // wherever the grid is persistent
  int sm90_ws_dense = -1;           // FLASHKIT_SM90_WS_DENSE=auto|0|1: the persistent ws grid's DENSE variant (v27:
                                    // the tile bookkeeping in 32-bit arithmetic) for fixed-length calls without
                                    // window, softcap or padded head dim -- auto (-1) and 1: wherever such a call
                                    // runs the persistent grid; 0: the general kernel
  int sm90_bwd_config = 0;          // FLASHKIT_SM90_BWD_CFG=1: the BM 64 Hopper backward at d64
  int sm90_bwd_ws = -1;             // FLASHKIT_SM90_BWD_WS=auto|0|1: the warp-specialized Hopper backward (v22;
                                    // d256: v24) at d128 and d256 (-1, auto; v6 at d64), 0 nowhere (the cp.async
                                    // ones, v6 and v16), 1 at d64, d128 and d256 (A/B runs and tests)
  // -- fp8 forward O rescale (docs/worklog/attention-fp8-cuda.md v4) --
  int fp8_rescale = -1;             // FLASHKIT_FP8_RESCALE=auto|0|1|2: the fp8 forward's O rescale: 0 after every
                                    // key tile, 1 skipped by warps whose row maxima all stayed (exact), 2 lazy max
                                    // (moves past 2^8 only); -1 (auto): fp8_rescale()'s choice per head dim
  int fp8_key_tile = 0;             // FLASHKIT_FP8_KEY_TILE=auto|128|192: the fp8 forward's key tile (worklog v5;
                                    // 192 at d128 with the exact rescale skip only); 0 (auto): fp8_key_tile()
  // -- end fp8 forward O rescale --
  int decode_max_splits = 0;        // FLASHKIT_DECODE_MAX_SPLITS (1..512); 0: the kernel's own cap
  DecodeCombine decode_combine = DecodeCombine::automatic;  // FLASHKIT_DECODE_COMBINE=auto|kernel|cluster|last
  bool decode_pdl = true;           // FLASHKIT_DECODE_PDL=0: no programmatic dependent launch (sm_90)
  int decode_narrow = -1;           // FLASHKIT_DECODE_NARROW=auto|0|1: the decode kernel's narrow CTA (4 warps,
                                    // 2-3 CTAs an SM, a grid that fills every SM; head_dim <= 128): -1 (auto):
                                    // decode_narrow_auto (decode/plan.hpp), 0 never, 1 wherever it applies
  bool decode_prefetch = true;      // FLASHKIT_DECODE_PREFETCH=0: the decode kernel no longer asks its first K/V blocks
                                    // into L2 before waiting for the previous grid (DecodePlan::prefetch; A/B runs)

  // ---- CUDA engine backend
  bool cuda_graphs = true;          // FLASHKIT_CUDA_GRAPHS
  bool cuda_fuse = true;            // FLASHKIT_CUDA_FUSE
  bool cuda_pingpong = true;        // FLASHKIT_CUDA_PINGPONG (residual shadow buffer)
  bool cuda_pdl = true;             // FLASHKIT_CUDA_PDL
  bool gemv_prefetch = false;       // FLASHKIT_CUDA_PREFETCH (L2 bulk prefetch of GEMV weight stripes)
  bool gemv_streaming_loads = true; // FLASHKIT_CUDA_LDCS
  EngineDecodeMerge engine_decode_merge = EngineDecodeMerge::automatic;  // FLASHKIT_CUDA_ATTN_CLUSTER=0: global
  bool device_argmax = true;        // FLASHKIT_DEVICE_ARGMAX (greedy decoding's argmax on the backend)
  bool paged_flash_chunks = true;   // FLASHKIT_PAGED_FLASH=0: a paged step's prompt chunks attend with the paged
                                    // decode kernel row by row instead of flash over gathered keys (A/B runs)
  int cuda_mamba_channels = 0;      // FLASHKIT_CUDA_MAMBA_CHANNELS=64|32|16|8: channels per block of the fused Mamba
                                    // mixer step (A/B runs); 0 (auto): engine/mamba_fusion.hpp's choice
  int cuda_gemv_plan = 0;           // FLASHKIT_CUDA_GEMV_PLAN=auto|legacy|balanced: the one-row GEMV's grid and
                                    // step shape (A/B runs); 0 (auto): engine/gemv_plan.hpp's choice, 1 legacy,
                                    // 2 balanced wherever it applies

  // ---- speculative decoding and training
  bool spec_exact = true;           // FLASHKIT_SPEC_EXACT=0: verify chains with the multi-row kernels (A/B runs)
  int64_t train_inject_nan_step = -1;  // FLASHKIT_TRAIN_INJECT_NAN_STEP: tests poison the loss of that step

  // ---- analysis (roofline of this CPU when it is not in the hardware table)
  double cpu_peak_gflops = 0;       // FLASHKIT_CPU_PEAK_GFLOPS; 0: measure
  double cpu_bw_gbs = 0;            // FLASHKIT_CPU_BW_GBS; 0: measure
};

// The FLASHKIT_* variables read into a Tuning (unset ones keep the defaults above; a value that does not parse is
// ignored with a one-time warning naming the variable). The only function of flashkit that reads the environment.
Tuning tuning_from_env();

// The process default used by calls that pass no Tuning: tuning_from_env() the first time it is needed, unless
// set_default_tuning() set it. Front ends set it once at start-up; thread-safe.
Tuning default_tuning();
void set_default_tuning(const Tuning& t);

}  // namespace flashkit
