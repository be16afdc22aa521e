// What serve::Engine's thread drives (src/serve/engine.cpp): the requests it holds and how one step advances them.
// Two implementations: the paged core (Scheduler + engine::PagedRunner, batched steps over KV blocks, in engine.cpp)
// for attention models, and the session core (session_core.hpp: one engine Session per running sequence) for models
// without a KV cache. The engine owns the threads, the inbox and the validation of requests; a core runs on the
// engine thread only.
#pragma once
#include <cstdint>
#include <memory>

#include "flashkit/serve.hpp"
#include "serve/scheduler.hpp"

namespace flashkit::serve {

class StepCore {
 public:
  virtual ~StepCore() = default;  // finishes what is left as "cancelled"
  virtual void add(std::unique_ptr<Sequence> seq) = 0;
  virtual void cancel(uint64_t id) = 0;  // finishes it now (no-op for unknown ids)
  virtual void reset_prefix_cache() = 0;
  virtual bool has_work() const = 0;
  virtual bool run_step() = 0;  // one step; false when there was nothing to run
  // Every field of EngineStats but waiting requests still in the engine's inbox.
  virtual void fill_stats(EngineStats& s) const = 0;
};

}  // namespace flashkit::serve
