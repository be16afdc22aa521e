// --tp N in generate / chat / serve: thread ranks in this process (engine/tp_model.cpp), or one process per GPU over
// NCCL (engine/tp_remote.cpp; docs/distributed.md, "Ranks in processes"). With processes, rank 0 is the process the
// user started: it re-executes itself for ranks 1..N-1 (dist::RankLauncher) when it loads the model, and runs the
// user-facing loop; the others load their shard, replay rank 0's calls and exit when rank 0's model goes away.
//
// Which one: FLASHKIT_TP_BACKEND = auto (default) | threads | nccl. auto takes processes when --device is CUDA,
// N > 1, the build has NCCL and N GPUs from --device's index on are visible; threads otherwise (one GPU: every rank
// on it). nccl forces processes, also for --tp 1 (the NCCL path checked on one GPU); a process started with
// WORLD_SIZE set (by this launcher or torchrun) is always one rank of a process job.
#pragma once
#include <memory>
#include <string>

#include "dist/launch.hpp"
#include "flashkit/engine.hpp"

namespace flashkit::cli {

class TpJob {
 public:
  // Decides (reads RANK / WORLD_SIZE / FLASHKIT_TP_BACKEND); spawns nothing yet.
  TpJob(int tp, const std::string& device);
  ~TpJob();  // rank 0: ends ranks still running, removes the rendezvous file
  TpJob(const TpJob&) = delete;
  TpJob& operator=(const TpJob&) = delete;

  bool processes() const { return processes_; }
  // A rank > 0 of a process job: the command runs follow() and nothing else (no output, no tokenizer work).
  bool follower() const { return processes_ && rank_ > 0; }
  // Rank 0 or the thread path: the model (Model::load, or this rank's shard wrapped as the leader; spawns the other
  // ranks first).
  std::shared_ptr<Model> load(const std::string& model, LoadOptions lo);
  // Ranks > 0: load the shard and replay rank 0's calls until it is done.
  void follow(const std::string& model, LoadOptions lo);
  // Rank 0, after its model is gone: waits for the other ranks and throws the first failure.
  void finish();

 private:
  LoadOptions rank_options(LoadOptions lo) const;
  bool processes_ = false, launched_ = false;
  int tp_ = 1, rank_ = 0, base_ = 0;
  std::string rendezvous_;
  std::unique_ptr<dist::RankLauncher> launcher_;
};

}  // namespace flashkit::cli
