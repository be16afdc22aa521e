// A tensor-parallel model (LoadOptions::tp > 1; engine/tp.hpp, docs/distributed.md, "Tensor-parallel inference"): tp rank models, each the
// ordinary engine over its shard, driven in lockstep on threads of this process and summing their o_proj / down_proj
// outputs through the "threads" communicator. Every Session / PagedRunner call runs on all ranks at once; the ranks'
// replicated tails (final norm, lm_head) give every rank the same logits, and rank 0's are returned.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "dist/comm.hpp"
#include "engine/paged.hpp"
#include "engine/tp.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace flashkit::engine {
namespace {

// Runs one job on every rank at once: rank 0 on the calling thread, the others on persistent worker threads (a
// decode step is short: no thread start per step). A rank that throws while a peer has not finished within a grace
// period aborts its communicator: the peer is blocked in a collective that will never complete, and abort() makes it
// throw. Errors raised by every rank alike (a bad argument, checked before any collective) abort nothing.
class RankThreads {
 public:
  RankThreads(std::vector<dist::Communicator*> comms) : comms_(std::move(comms)) {
    const int n = int(comms_.size());
    for (int r = 1; r < n; ++r) workers_.emplace_back([this, r] { loop(r); });
  }
  ~RankThreads() {
    {
      const std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      ++generation_;
    }
    start_.notify_all();
    for (auto& t : workers_) t.join();
  }
  // f(rank) on every rank; rethrows the first error raised (in time).
  void run(const std::function<void(int)>& f) {
    const int n = int(comms_.size());
    {
      const std::lock_guard<std::mutex> lk(mu_);
      job_ = &f;
      pending_ = n;
      first_error_ = nullptr;
      ++generation_;
    }
    start_.notify_all();
    call(0);
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (first_error_) std::rethrow_exception(first_error_);
  }

 private:
  void call(int r) {
    std::exception_ptr err;
    std::string what = "a peer rank failed";
    try {
      (*job_)(r);
    } catch (const std::exception& e) {
      err = std::current_exception();
      what = e.what();
    } catch (...) {
      err = std::current_exception();
    }
    std::unique_lock<std::mutex> lk(mu_);
    if (err) {
      if (!first_error_) first_error_ = err;
      // The others finish (or fail alike: every rank checks the same arguments) at once, unless they wait for this
      // rank inside a collective.
      ++failing_;
      done_.notify_all();
      if (!done_.wait_for(lk, std::chrono::seconds(2), [&] { return pending_ == failing_; })) {
        lk.unlock();
        comms_[size_t(r)]->abort("tensor-parallel rank " + std::to_string(r) + " failed: " + what);
        lk.lock();
      }
      --failing_;
    }
    --pending_;
    done_.notify_all();
  }
  void loop(int r) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        start_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
      }
      call(r);
    }
  }

  std::vector<dist::Communicator*> comms_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;  // ranks of the current job not finished
  int failing_ = 0;  // of those, ranks that threw and wait for the others (or abort)
  bool stop_ = false;
  std::exception_ptr first_error_;
};

class TpModel;

class TpSession final : public Session, public DeviceGreedy {
 public:
  TpSession(std::shared_ptr<TpModel> m, std::vector<std::unique_ptr<Session>> ranks)
      : m_(std::move(m)), ranks_(std::move(ranks)) {}
  void prefill(std::span<const int32_t> tokens, bool all_logits) override {
    all([&](Session& s) { s.prefill(tokens, all_logits); });
  }
  void decode(int32_t token) override {
    all([&](Session& s) { s.decode(token); });
  }
  // Greedy steps: every rank reduces its (identical) logits row on its device; rank 0's id is the step's.
  bool device_argmax_allowed() const override {
    auto* g = dynamic_cast<const DeviceGreedy*>(ranks_[0].get());
    return g && g->device_argmax_allowed();
  }
  ArgmaxResult decode_argmax(int32_t token) override {
    ArgmaxResult out;
    all([&](Session& s) {
      const ArgmaxResult a = dynamic_cast<DeviceGreedy&>(s).decode_argmax(token);
      if (&s == ranks_[0].get()) out = a;
    });
    return out;
  }
  std::span<const float> logits() const override { return ranks_[0]->logits(); }
  const std::vector<float>& all_logits() const override { return ranks_[0]->all_logits(); }
  int64_t position() const override { return ranks_[0]->position(); }
  int64_t max_context() const override { return ranks_[0]->max_context(); }
  void reset() override { each([&](Session& s) { s.reset(); }); }
  const Model& model() const override;
  // Speculative decoding: rollback and tree acceptance touch each rank's own cache only (no collective).
  void truncate(int64_t n) override { each([&](Session& s) { s.truncate(n); }); }
  int64_t max_verify_rows() const override { return ranks_[0]->max_verify_rows(); }
  void forward_all_logits(std::span<const int32_t> tokens) override {
    all([&](Session& s) { s.forward_all_logits(tokens); });
  }
  bool supports_tree() const override { return ranks_[0]->supports_tree(); }
  void forward_tree(std::span<const int32_t> tokens, std::span<const int32_t> parents) override {
    all([&](Session& s) { s.forward_tree(tokens, parents); });
  }
  void accept_tree_path(std::span<const int32_t> nodes) override {
    each([&](Session& s) { s.accept_tree_path(nodes); });
  }

 private:
  void all(const std::function<void(Session&)>& f);
  // One rank after the other, rank 0 first (its arguments are checked like every rank's, so a bad one stops there).
  void each(const std::function<void(Session&)>& f);
  std::shared_ptr<TpModel> m_;
  std::vector<std::unique_ptr<Session>> ranks_;
};

class TpModel final : public Model {
 public:
  TpModel(const std::filesystem::path& dir, const LoadOptions& opts) {
    check_threads(opts.threads, "threads");  // before it is divided among the ranks
    comms_ = dist::make_thread_ranks(opts.tp);
    LoadOptions ro = opts;
    ro.tp = 1;
    // CPU ranks share the cores: each gets its share of the threads (at least one).
    ro.threads = std::max(1, (opts.threads > 0 ? opts.threads : num_threads()) / opts.tp);
    std::vector<dist::Communicator*> cs;
    for (auto& c : comms_) cs.push_back(c.get());
    // One after the other: rank 0 refuses a config that does not split (--tp) before any weight is read.
    for (int r = 0; r < opts.tp; ++r) ranks_.push_back(load_rank_model(dir, ro, *cs[size_t(r)]));
    threads_ = std::make_unique<RankThreads>(cs);
    info_ = ranks_[0]->info();
    info_.tp = opts.tp;
    info_.backend += " x " + std::to_string(opts.tp) + " tensor-parallel ranks (" + comms_[0]->kind() + ")";
    info_.device_weight_bytes = info_.device_scratch_bytes = 0;
    for (auto& r : ranks_) {
      info_.device_weight_bytes += r->info().device_weight_bytes;
      info_.device_scratch_bytes += r->info().device_scratch_bytes;
    }
  }
  ~TpModel() override {
    threads_.reset();  // stop the rank threads before the rank models they run go away
  }
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<Session> new_session() override {
    const std::lock_guard<std::mutex> lk(mu_);
    std::vector<std::unique_ptr<Session>> s;
    for (auto& r : ranks_) s.push_back(r->new_session());
    return std::make_unique<TpSession>(std::static_pointer_cast<TpModel>(shared_from_this()), std::move(s));
  }
  OpTimes& op_times() override { return ranks_[0]->op_times(); }
  GraphCounts graph_counts() const override { return ranks_[0]->graph_counts(); }

  std::vector<Model*> ranks() const {
    std::vector<Model*> v;
    for (auto& r : ranks_) v.push_back(r.get());
    return v;
  }
  // Runs f(rank) on every rank at once; one call at a time per model (the ranks' collectives pair up in call order).
  void run(const std::function<void(int)>& f) {
    const std::lock_guard<std::mutex> lk(mu_);
    threads_->run(f);
  }
  std::mutex& mutex() { return mu_; }

 private:
  std::vector<std::unique_ptr<dist::Communicator>> comms_;
  std::vector<std::shared_ptr<Model>> ranks_;
  std::unique_ptr<RankThreads> threads_;
  ModelInfo info_;
  std::mutex mu_;
};

const Model& TpSession::model() const { return *m_; }

void TpSession::all(const std::function<void(Session&)>& f) {
  m_->run([&](int r) { f(*ranks_[size_t(r)]); });
}

void TpSession::each(const std::function<void(Session&)>& f) {
  const std::lock_guard<std::mutex> lk(m_->mutex());
  for (auto& s : ranks_) f(*s);
}

class TpPagedRunner final : public PagedRunner {
 public:
  TpPagedRunner(TpModel& m, const PagedRunnerOptions& o) : m_(m) {
    for (Model* r : m.ranks()) ranks_.push_back(make_paged_runner(*r, o));
    scratch_.resize(ranks_.size());
    greedy_scratch_.resize(ranks_.size());
  }
  const PagedRunnerOptions& options() const override { return ranks_[0]->options(); }
  int64_t max_blocks_per_seq() const override { return ranks_[0]->max_blocks_per_seq(); }
  void step(const PagedStep& st, float* logits) override {
    const size_t n = st.logit_rows.size() * size_t(m_.info().vocab_size);
    m_.run([&](int r) {
      if (r == 0) return ranks_[0]->step(st, logits);
      scratch_[size_t(r)].resize(n);  // the other ranks' logits are the same; they land in scratch
      ranks_[size_t(r)]->step(st, scratch_[size_t(r)].data());
    });
  }
  void step_greedy(const PagedStep& st, std::span<ArgmaxResult> out) override {
    m_.run([&](int r) {
      if (r == 0) return ranks_[0]->step_greedy(st, out);
      greedy_scratch_[size_t(r)].resize(out.size());
      ranks_[size_t(r)]->step_greedy(st, greedy_scratch_[size_t(r)]);
    });
  }
  void logits_row(int64_t i, float* out) override { ranks_[0]->logits_row(i, out); }
  bool greedy_allowed() const override { return ranks_[0]->greedy_allowed(); }

 private:
  TpModel& m_;
  std::vector<std::unique_ptr<PagedRunner>> ranks_;
  std::vector<std::vector<float>> scratch_;
  std::vector<std::vector<ArgmaxResult>> greedy_scratch_;
};

}  // namespace

std::shared_ptr<Model> load_tp_model(const std::filesystem::path& dir, const LoadOptions& opts) {
  check_tp(opts.tp);
  return std::make_shared<TpModel>(dir, opts);
}

std::vector<Model*> tp_ranks(const Model& model) {
  if (auto* tp = dynamic_cast<const TpModel*>(&model)) return tp->ranks();
  return {};
}

std::unique_ptr<PagedRunner> make_tp_paged_runner(Model& model, const PagedRunnerOptions& opts) {
  auto* tp = dynamic_cast<TpModel*>(&model);
  if (!tp) fail(Status::internal, "make_tp_paged_runner: not a tensor-parallel model");
  return std::make_unique<TpPagedRunner>(*tp, opts);
}

}  // namespace flashkit::engine
