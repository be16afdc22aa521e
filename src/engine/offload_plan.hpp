// CPU offload of decoder-layer weights (CUDA backend; docs/serving.md "CPU offload"): which layers stay in pinned
// host memory and are streamed into a few device slots every forward pass, and what that costs in device and host
// bytes. Pure functions of sizes, unit-tested in the CPU build (tests/engine/test_offload_plan.cpp).
//
// The offloaded layers are the LAST n decoder layers: the copies of the first slots then overlap the resident
// layers' compute at the start of every pass. Each offloaded layer's matrices (qkv, o, gate|up, down as stored) go
// to one slot (slot = index among the offloaded layers % slots); norms, biases, embeddings and lm_head stay resident.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace flashkit::engine {

struct OffloadSizes {
  std::span<const int64_t> layer_bytes;  // per decoder layer: device bytes of its streamable matrices
  int64_t resident_bytes = 0;            // always on the device: embeddings, lm_head, vectors, biases
  int64_t kv_bytes = 0;                  // one session's KV cache
  int64_t workspace_bytes = 0;           // activations, scratch, library workspaces
  int slots = 2;                         // device slots the offloaded layers stream through (double buffering)
};

struct OffloadPlan {
  int64_t offloaded_layers = 0;  // the last `offloaded_layers` layers live in pinned host memory
  int64_t first_offloaded = 0;   // = layers - offloaded_layers
  int slots = 0;                 // device slots used (min(slots, offloaded_layers))
  int64_t slot_bytes = 0;        // bytes of one slot: the largest offloaded layer
  int64_t device_bytes = 0;      // resident + resident layers + slots + KV + workspace
  int64_t host_pinned_bytes = 0; // the offloaded layers' matrices
};

// The plan with exactly n offloaded layers; invalid_argument naming --offload-layers when n is outside [0, layers].
OffloadPlan plan_offload_layers(const OffloadSizes& s, int64_t n);

// The fewest offloaded layers whose device bytes fit `budget` (--gpu-memory); out_of_memory naming the budget and
// what the smallest plan (every layer offloaded) still needs when none fits.
OffloadPlan plan_offload_budget(const OffloadSizes& s, int64_t budget);

// "1073741824", "512M", "24G", "1.5GiB", "64K" (binary units); -1 for anything else (empty, negative, NaN, junk,
// beyond 9e18).
int64_t parse_byte_count(const std::string& s);

}  // namespace flashkit::engine
