#include "tp_launch.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/env.hpp"
#include "dist/comm.hpp"
#include "engine/tp.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace flashkit::cli {
namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

bool is_cuda(const std::string& device) { return device == "cuda" || device.rfind("cuda:", 0) == 0; }
int device_base(const std::string& device) { return device.size() > 5 ? std::atoi(device.c_str() + 5) : 0; }

}  // namespace

TpJob::TpJob(int tp, const std::string& device) : tp_(tp), base_(device_base(device)) {
  const dist::RankEnv env = dist::rank_env();
  const int backend = env::choice("FLASHKIT_TP_BACKEND", {"auto", "threads", "nccl"}, 0);
  if (env.launched && env.world_size != tp)
    bad("--tp " + std::to_string(tp) + ": this process was launched as one of WORLD_SIZE=" +
        std::to_string(env.world_size) + " ranks");
  // Only a forced or possible process job asks the driver for the device count.
  const bool may = env.launched || backend == 2 || (backend == 0 && is_cuda(device) && tp > 1);
  processes_ = may && engine::tp_uses_processes(tp, device, backend, env.launched, dist::nccl_built(),
                                        dist::nccl_built() ? cuda_device_count() : 0);
  if (!processes_) return;
  launched_ = env.launched;
  if (launched_) {
    if (env.rendezvous.empty())
      bad("--tp " + std::to_string(tp) + ": FLASHKIT_RENDEZVOUS must name the file rank 0 writes the NCCL id to");
    rank_ = env.rank;
    rendezvous_ = env.rendezvous;
  } else {
    rendezvous_ = (std::filesystem::temp_directory_path() /
                   ("flashkit-tp-nccl-id-" + std::to_string(::getpid()))).string();
  }
}

TpJob::~TpJob() {
  launcher_.reset();  // ends and reaps ranks still running
  if (processes_ && !launched_) {
    std::error_code ec;
    std::filesystem::remove(rendezvous_, ec);
  }
}

LoadOptions TpJob::rank_options(LoadOptions lo) const {
  lo.tp = 1;  // this process holds one rank; the communicator's size is the rank count
  lo.device = "cuda:" + std::to_string(base_ + rank_);
  return lo;
}

std::shared_ptr<Model> TpJob::load(const std::string& model, LoadOptions lo) {
  if (!processes_) return Model::load(model, lo);
  if (rank_ != 0) fail(Status::internal, "TpJob::load on rank " + std::to_string(rank_) + " (ranks > 0 follow)");
  if (!launched_) {
    std::error_code ec;
    std::filesystem::remove(rendezvous_, ec);  // a stale id from an earlier job with this pid
    const int tp = tp_;
    // A rank that fails (say, at load) has printed its error; rank 0 may wait for it in a collective, so the job
    // ends here with that rank's status (2 for bad input, as a one-process run would).
    launcher_ = std::make_unique<dist::RankLauncher>(
        dist::self_exe(), dist::self_args(), tp_, rendezvous_, [tp](const dist::RankExit& e) {
          std::fprintf(stderr, "flashkit: --tp %d: rank %d exited with status %d; stopping the other ranks\n", tp,
                       e.rank, e.status);
          std::fflush(stderr);
          std::_Exit(e.status == 2 ? 2 : 1);
        });
  }
  std::shared_ptr<dist::Communicator> comm =
      dist::make_nccl(0, tp_, base_, dist::exchange_nccl_id(rendezvous_, 0));
  auto local = engine::load_rank_model(model, rank_options(lo), *comm);
  return engine::make_tp_leader(std::move(local), std::move(comm));
}

void TpJob::follow(const std::string& model, LoadOptions lo) {
  if (!follower()) fail(Status::internal, "TpJob::follow on rank 0");
  std::shared_ptr<dist::Communicator> comm =
      dist::make_nccl(rank_, tp_, base_ + rank_, dist::exchange_nccl_id(rendezvous_, rank_));
  auto local = engine::load_rank_model(model, rank_options(lo), *comm);
  engine::follow_tp_leader(*local, *comm);
}

void TpJob::finish() {
  if (!launcher_) return;
  const std::string failed = dist::describe_failures(launcher_->wait());
  launcher_.reset();
  if (!failed.empty()) fail(Status::internal, "--tp " + std::to_string(tp_) + ": " + failed);
}

}  // namespace flashkit::cli
