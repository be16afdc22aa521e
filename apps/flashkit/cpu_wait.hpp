// Passive waiting for the CLI's OpenMP threads (Tuning::cpu_wait, FLASHKIT_CPU_WAIT).
#pragma once
#include "flashkit/tuning.hpp"

namespace flashkit::cli {

// libgomp reads OMP_WAIT_POLICY once, when the process loads it, so the policy can only be chosen before start-up:
// when `t` asks for a policy the environment does not hold yet, this sets OMP_WAIT_POLICY and re-executes the
// program with the same arguments (once: the new process finds the variable set). Returns only when nothing is to
// change or the re-execution failed (then the run goes on with OpenMP's default, spinning waits).
void apply_cpu_wait_policy(const Tuning& t, char** argv);

}  // namespace flashkit::cli
