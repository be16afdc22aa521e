// Tensor parallelism with one process per rank (engine/tp.hpp, docs/distributed.md, "Ranks in processes"). Rank 0
// runs the user-facing loop on a *leader* model; before each of its rank model's calls it broadcasts the call (a
// small command: kind, session id, token ids, positions, ...) over the communicator, and ranks > 0, in
// follow_tp_leader, replay it on their own rank models. Every rank thus makes the same calls in the same order, so
// their all-reduces pair up exactly as the thread ranks' do (tp_model.cpp).
//
// The wire format is int32 words. One broadcast of kFirst words carries [total words, kind, id, body...]; a body
// longer than that follows in further broadcasts of at most kChunk words. NCCL broadcasts need device buffers: the
// channel stages through one device buffer there (host buffers for the "threads" and "single" communicators).
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "dist/comm.hpp"
#include "dist/memory.hpp"
#include "engine/paged.hpp"
#include "engine/tp.hpp"
#include "flashkit/error.hpp"

namespace flashkit::engine {
namespace {

enum class Cmd : int32_t {
  stop = 1,
  new_session,
  drop_session,
  prefill,
  decode,
  decode_argmax,
  reset,
  truncate,
  forward_all,
  forward_tree,
  accept_tree,
  new_paged,
  drop_paged,
  paged_step,
  paged_greedy,
};

constexpr size_t kFirst = 64;       // words of the first broadcast of a command (a decode step fits)
constexpr size_t kChunk = 1 << 16;  // words of each further broadcast

// A command being written (rank 0) or read (ranks > 0).
struct Message {
  std::vector<int32_t> w;  // [kind, id, body...]
  size_t at = 2;           // read position

  Message(Cmd kind = Cmd::stop, int32_t id = 0) : w{int32_t(kind), id} {}
  Cmd kind() const { return Cmd(w[0]); }
  int32_t id() const { return w[1]; }
  Message& i64(int64_t v) {
    w.push_back(int32_t(uint64_t(v) & 0xffffffffu));
    w.push_back(int32_t(uint64_t(v) >> 32));
    return *this;
  }
  Message& ids(std::span<const int32_t> a) {
    i64(int64_t(a.size()));
    w.insert(w.end(), a.begin(), a.end());
    return *this;
  }
  int64_t read_i64() {
    need(2);
    const uint64_t lo = uint32_t(w[at]), hi = uint32_t(w[at + 1]);
    at += 2;
    return int64_t(lo | (hi << 32));
  }
  std::span<const int32_t> read_ids() {
    const int64_t n = read_i64();
    if (n < 0) fail(Status::internal, "tensor-parallel command: negative array length");
    need(size_t(n));
    std::span<const int32_t> s(w.data() + at, size_t(n));
    at += size_t(n);
    return s;
  }
  void need(size_t n) const {
    if (at + n > w.size()) fail(Status::internal, "tensor-parallel command: truncated message");
  }
};

// The broadcast channel from rank 0 to the others.
class Channel {
 public:
  explicit Channel(dist::Communicator& comm) : comm_(comm), device_(std::strcmp(comm.kind(), "nccl") == 0) {
    if (!device_) return;
    device_index_ = dist::current_device();  // the rank's GPU (make_nccl set it)
    dev_ = dist::device_alloc(kChunk * sizeof(int32_t));
  }
  ~Channel() { dist::device_free(dev_); }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  void send(const Message& m) {
    std::vector<int32_t> first(kFirst, 0);
    first[0] = int32_t(m.w.size());
    std::copy_n(m.w.begin(), std::min(m.w.size(), kFirst - 1), first.begin() + 1);
    cast(first.data(), kFirst);
    for (size_t at = kFirst - 1; at < m.w.size(); at += kChunk) {
      const size_t n = std::min(kChunk, m.w.size() - at);
      std::vector<int32_t> part(m.w.begin() + ptrdiff_t(at), m.w.begin() + ptrdiff_t(at + n));
      cast(part.data(), n);
    }
  }
  Message receive() {
    std::vector<int32_t> first(kFirst, 0);
    cast(first.data(), kFirst);
    const size_t total = size_t(uint32_t(first[0]));
    if (total < 2) fail(Status::internal, "tensor-parallel command: malformed header");
    Message m;
    m.w.assign(first.begin() + 1, first.begin() + ptrdiff_t(std::min(total, kFirst - 1) + 1));
    for (size_t at = kFirst - 1; at < total; at += kChunk) {
      const size_t n = std::min(kChunk, total - at);
      std::vector<int32_t> part(n);
      cast(part.data(), n);
      m.w.insert(m.w.end(), part.begin(), part.end());
    }
    return m;
  }

 private:
  // Broadcasts n words from rank 0 in place. The words travel as f32 elements: a broadcast copies bits, it adds
  // nothing, so any int32 pattern arrives unchanged.
  void cast(int32_t* words, size_t n) {
    if (!device_) return comm_.broadcast(words, n, DType::f32, 0);
    // The rank's all-reduces run on its backend's stream, this broadcast on the default one: NCCL wants the
    // collectives of one communicator in one order on the GPU, so the previous step's must be done (they are: every
    // step ends with a download; this wait costs microseconds then).
    dist::set_device(device_index_);  // a serving thread may not have selected the rank's GPU yet
    dist::device_synchronize();
    dist::copy_bytes(dev_, words, n * sizeof(int32_t), nullptr);
    comm_.broadcast(dev_, n, DType::f32, 0);
    dist::copy_bytes(words, dev_, n * sizeof(int32_t), nullptr);  // waits for the broadcast (same stream)
  }
  dist::Communicator& comm_;
  const bool device_;
  int device_index_ = 0;
  void* dev_ = nullptr;
};

Message& paged_fields(Message& m, const PagedStep& st) {
  m.ids(st.tokens).ids(st.positions).ids(st.row_seq).ids(st.block_tables).ids(st.logit_rows);
  return m.i64(st.num_seqs).i64(st.max_blocks);
}
PagedStep read_paged(Message& m) {
  PagedStep st;
  st.tokens = m.read_ids();
  st.positions = m.read_ids();
  st.row_seq = m.read_ids();
  st.block_tables = m.read_ids();
  st.logit_rows = m.read_ids();
  st.num_seqs = m.read_i64();
  st.max_blocks = m.read_i64();
  return st;
}

// Errors every rank raises alike, from arguments it checks before any collective: the others raise them too, so the
// job goes on. Anything else may leave peers blocked in a collective.
bool raised_alike(const std::exception& e) {
  auto* fe = dynamic_cast<const Error*>(&e);
  return fe && (fe->status() == Status::invalid_argument || fe->status() == Status::out_of_memory);
}

class LeaderModel;

class LeaderSession final : public Session, public DeviceGreedy {
 public:
  LeaderSession(std::shared_ptr<LeaderModel> m, int32_t id, std::unique_ptr<Session> local)
      : m_(std::move(m)), id_(id), local_(std::move(local)) {}
  ~LeaderSession() override;
  void prefill(std::span<const int32_t> tokens, bool all_logits) override {
    Message c(Cmd::prefill, id_);
    c.i64(all_logits).ids(tokens);
    mirror(c, [&] { local_->prefill(tokens, all_logits); });
  }
  void decode(int32_t token) override {
    mirror(Message(Cmd::decode, id_).i64(token), [&] { local_->decode(token); });
  }
  bool device_argmax_allowed() const override {
    auto* g = dynamic_cast<const DeviceGreedy*>(local_.get());
    return g && g->device_argmax_allowed();
  }
  ArgmaxResult decode_argmax(int32_t token) override {
    ArgmaxResult out;
    mirror(Message(Cmd::decode_argmax, id_).i64(token),
           [&] { out = dynamic_cast<DeviceGreedy&>(*local_).decode_argmax(token); });
    return out;
  }
  std::span<const float> logits() const override { return local_->logits(); }
  const std::vector<float>& all_logits() const override { return local_->all_logits(); }
  int64_t position() const override { return local_->position(); }
  int64_t max_context() const override { return local_->max_context(); }
  void reset() override {
    mirror(Message(Cmd::reset, id_), [&] { local_->reset(); });
  }
  const Model& model() const override;
  void truncate(int64_t n) override {
    mirror(Message(Cmd::truncate, id_).i64(n), [&] { local_->truncate(n); });
  }
  int64_t max_verify_rows() const override { return local_->max_verify_rows(); }
  void forward_all_logits(std::span<const int32_t> tokens) override {
    mirror(Message(Cmd::forward_all, id_).ids(tokens), [&] { local_->forward_all_logits(tokens); });
  }
  bool supports_tree() const override { return local_->supports_tree(); }
  void forward_tree(std::span<const int32_t> tokens, std::span<const int32_t> parents) override {
    mirror(Message(Cmd::forward_tree, id_).ids(tokens).ids(parents), [&] { local_->forward_tree(tokens, parents); });
  }
  void accept_tree_path(std::span<const int32_t> nodes) override {
    mirror(Message(Cmd::accept_tree, id_).ids(nodes), [&] { local_->accept_tree_path(nodes); });
  }

 private:
  template <class F>
  void mirror(const Message& c, F&& local);
  std::shared_ptr<LeaderModel> m_;
  int32_t id_;
  std::unique_ptr<Session> local_;
};

class LeaderModel final : public Model {
 public:
  LeaderModel(std::shared_ptr<Model> local, std::shared_ptr<dist::Communicator> comm)
      : comm_(std::move(comm)), channel_(*comm_), local_(std::move(local)) {
    world_ = comm_->size();
    info_ = local_->info();
    info_.tp = world_;
    info_.backend += " x " + std::to_string(world_) + " tensor-parallel ranks (" + comm_->kind() + ", one process each)";
    info_.device_weight_bytes *= world_;
    info_.device_scratch_bytes *= world_;
  }
  ~LeaderModel() override {
    // The followers leave their loop (unless a failure left the collectives unusable).
    try {
      if (!broken_) channel_.send(Message(Cmd::stop));
    } catch (...) {
    }
  }
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<Session> new_session() override {
    const std::lock_guard<std::mutex> lk(mu_);
    const int32_t id = next_id_++;
    std::unique_ptr<Session> s;
    try {
      run(Message(Cmd::new_session, id), [&] { s = local_->new_session(); });
    } catch (...) {
      send_quietly(Message(Cmd::drop_session, id));  // a follower that made its session drops it
      throw;
    }
    return std::make_unique<LeaderSession>(std::static_pointer_cast<LeaderModel>(shared_from_this()), id,
                                           std::move(s));
  }
  OpTimes& op_times() override { return local_->op_times(); }

  // Broadcasts the command, then runs rank 0's part. A failure other than a bad argument (which every rank
  // raises alike) aborts the communicator: the followers may wait in a collective rank 0 will never join.
  template <class F>
  void run(const Message& c, F&& local) {
    if (broken_) fail(Status::internal, "tensor-parallel model: unusable after an earlier rank failure");
    channel_.send(c);
    try {
      local();
    } catch (const std::exception& e) {
      if (!raised_alike(e)) {
        broken_ = true;
        comm_->abort(std::string("tensor-parallel rank 0 failed: ") + e.what());
      }
      throw;
    }
  }
  // The model's calls go one at a time: the command stream is the ranks' order of collectives.
  std::mutex& mutex() { return mu_; }
  Model& local() const { return *local_; }
  int world() const { return world_; }
  int32_t new_id() { return next_id_++; }
  void send_quietly(const Message& c) {
    try {
      if (!broken_) channel_.send(c);
    } catch (...) {
    }
  }

 private:
  std::shared_ptr<dist::Communicator> comm_;  // outlives the rank model, which all-reduces through it
  Channel channel_;
  std::shared_ptr<Model> local_;
  ModelInfo info_;
  int world_ = 1;
  int32_t next_id_ = 1;
  bool broken_ = false;
  std::mutex mu_;
};

const Model& LeaderSession::model() const { return *m_; }

LeaderSession::~LeaderSession() {
  const std::lock_guard<std::mutex> lk(m_->mutex());
  local_.reset();
  m_->send_quietly(Message(Cmd::drop_session, id_));
}

template <class F>
void LeaderSession::mirror(const Message& c, F&& local) {
  const std::lock_guard<std::mutex> lk(m_->mutex());
  m_->run(c, std::forward<F>(local));
}

class LeaderPagedRunner final : public PagedRunner {
 public:
  LeaderPagedRunner(LeaderModel& m, const PagedRunnerOptions& o) : m_(m) {
    const std::lock_guard<std::mutex> lk(m_.mutex());
    id_ = m_.new_id();
    Message c(Cmd::new_paged, id_);
    c.i64(o.block_size).i64(o.num_blocks).i64(o.max_rows).i64(o.max_seqs);
    m_.run(c, [&] { local_ = make_paged_runner(m_.local(), o); });
  }
  ~LeaderPagedRunner() override {
    const std::lock_guard<std::mutex> lk(m_.mutex());
    local_.reset();
    m_.send_quietly(Message(Cmd::drop_paged, id_));
  }
  const PagedRunnerOptions& options() const override { return local_->options(); }
  int64_t max_blocks_per_seq() const override { return local_->max_blocks_per_seq(); }
  void step(const PagedStep& st, float* logits) override {
    Message c(Cmd::paged_step, id_);
    const std::lock_guard<std::mutex> lk(m_.mutex());
    m_.run(paged_fields(c, st), [&] { local_->step(st, logits); });
  }
  void step_greedy(const PagedStep& st, std::span<ArgmaxResult> out) override {
    Message c(Cmd::paged_greedy, id_);
    const std::lock_guard<std::mutex> lk(m_.mutex());
    m_.run(paged_fields(c, st), [&] { local_->step_greedy(st, out); });
  }
  void logits_row(int64_t i, float* out) override { local_->logits_row(i, out); }
  bool greedy_allowed() const override { return local_->greedy_allowed(); }

 private:
  LeaderModel& m_;
  int32_t id_ = 0;
  std::unique_ptr<PagedRunner> local_;
};

// Replays one command on a follower rank.
class Follower {
 public:
  explicit Follower(Model& model) : model_(model) {}
  // false after Cmd::stop.
  bool apply(Message& c) {
    switch (c.kind()) {
      case Cmd::stop:
        return false;
      case Cmd::new_session:
        sessions_[c.id()] = model_.new_session();
        break;
      case Cmd::drop_session:
        sessions_.erase(c.id());
        break;
      case Cmd::prefill: {
        const bool all = c.read_i64() != 0;
        session(c).prefill(c.read_ids(), all);
        break;
      }
      case Cmd::decode:
        session(c).decode(int32_t(c.read_i64()));
        break;
      case Cmd::decode_argmax:
        dynamic_cast<DeviceGreedy&>(session(c)).decode_argmax(int32_t(c.read_i64()));
        break;
      case Cmd::reset:
        session(c).reset();
        break;
      case Cmd::truncate:
        session(c).truncate(c.read_i64());
        break;
      case Cmd::forward_all:
        session(c).forward_all_logits(c.read_ids());
        break;
      case Cmd::forward_tree: {
        const auto tokens = c.read_ids();
        session(c).forward_tree(tokens, c.read_ids());
        break;
      }
      case Cmd::accept_tree:
        session(c).accept_tree_path(c.read_ids());
        break;
      case Cmd::new_paged: {
        PagedRunnerOptions o;
        o.block_size = c.read_i64();
        o.num_blocks = c.read_i64();
        o.max_rows = c.read_i64();
        o.max_seqs = c.read_i64();
        runners_[c.id()] = make_paged_runner(model_, o);
        break;
      }
      case Cmd::drop_paged:
        runners_.erase(c.id());
        break;
      case Cmd::paged_step: {
        const PagedStep st = read_paged(c);
        scratch_.resize(st.logit_rows.size() * size_t(model_.info().vocab_size));
        runner(c).step(st, scratch_.data());  // the same logits as rank 0's (replicated lm_head)
        break;
      }
      case Cmd::paged_greedy: {
        const PagedStep st = read_paged(c);
        greedy_.resize(st.logit_rows.size());
        runner(c).step_greedy(st, greedy_);
        break;
      }
      default:
        fail(Status::internal, "tensor-parallel command: unknown kind " + std::to_string(int(c.kind())));
    }
    return true;
  }

 private:
  Session& session(const Message& c) {
    auto it = sessions_.find(c.id());
    if (it == sessions_.end())
      fail(Status::internal, "tensor-parallel command: no session " + std::to_string(c.id()) + " on this rank");
    return *it->second;
  }
  PagedRunner& runner(const Message& c) {
    auto it = runners_.find(c.id());
    if (it == runners_.end())
      fail(Status::internal, "tensor-parallel command: no paged runner " + std::to_string(c.id()) + " on this rank");
    return *it->second;
  }
  Model& model_;
  std::map<int32_t, std::unique_ptr<Session>> sessions_;
  std::map<int32_t, std::unique_ptr<PagedRunner>> runners_;
  std::vector<float> scratch_;
  std::vector<ArgmaxResult> greedy_;
};

}  // namespace

std::shared_ptr<Model> make_tp_leader(std::shared_ptr<Model> rank0, std::shared_ptr<dist::Communicator> comm) {
  if (!rank0 || !comm) fail(Status::invalid_argument, "make_tp_leader: rank0 and comm must not be null");
  if (comm->rank() != 0)
    fail(Status::invalid_argument, "make_tp_leader: comm must be rank 0's, got rank " + std::to_string(comm->rank()));
  return std::make_shared<LeaderModel>(std::move(rank0), std::move(comm));
}

void follow_tp_leader(Model& rank_model, dist::Communicator& comm) {
  if (comm.rank() == 0) fail(Status::invalid_argument, "follow_tp_leader: rank 0 leads; it does not follow");
  Channel channel(comm);
  Follower f(rank_model);
  for (;;) {
    Message c = channel.receive();
    try {
      if (!f.apply(c)) return;
    } catch (const std::exception& e) {
      if (raised_alike(e)) continue;  // rank 0 raised the same error and goes on
      comm.abort("tensor-parallel rank " + std::to_string(comm.rank()) + " failed: " + e.what());
      throw;
    }
  }
}

Model* tp_leader_local(const Model& model, int* world) {
  auto* l = dynamic_cast<const LeaderModel*>(&model);
  if (!l) return nullptr;
  if (world) *world = l->world();
  return &l->local();
}

std::unique_ptr<PagedRunner> make_tp_leader_paged_runner(Model& model, const PagedRunnerOptions& opts) {
  auto* l = dynamic_cast<LeaderModel*>(&model);
  if (!l) fail(Status::internal, "make_tp_leader_paged_runner: not a tensor-parallel leader model");
  return std::make_unique<LeaderPagedRunner>(*l, opts);
}

}  // namespace flashkit::engine
