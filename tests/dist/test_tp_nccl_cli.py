"""--tp ranks in processes (FLASHKIT_TP_BACKEND, apps/flashkit/tp_launch.hpp) through the command line
(FLASHKIT_CLI=<binary>): what a CPU build (or a machine without enough GPUs) can check. Every refusal is one line on
stderr with exit status 2, before any rank is spawned; the thread path stays what it was. The NCCL runs themselves
are in tools/gpu/tp_nccl.sh."""
import glob
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "models", "target")


def _find_cli():
    path = os.environ.get("FLASHKIT_CLI")
    if path:
        return path
    found = sorted(glob.glob(os.path.join(REPO, "build*", "bin", "flashkit")), key=os.path.getmtime)
    if not found:
        raise RuntimeError("set FLASHKIT_CLI to the flashkit binary (no build*/bin/flashkit found)")
    return found[-1]


CLI = _find_cli()
GEN = ["generate", "-m", MODEL, "--prompt-ids", "1,5,9", "-n", "6", "--temp", "0", "--ids", "--ignore-eos"]


def run(*args, env=None, stdin=None):
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "FLASHKIT_RENDEZVOUS")}
    e.update(OMP_WAIT_POLICY="passive", **(env or {}))
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120, env=e,
                          stdin=subprocess.DEVNULL if stdin is None else stdin)


def clean_failure(p, *needles):
    assert p.returncode == 2, f"expected exit status 2, got {p.returncode}\n{p.stderr}"
    lines = [l for l in p.stderr.splitlines() if l.startswith("flashkit: error:")]
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert p.stdout == "", p.stdout


def test_forced_nccl_needs_cuda():
    p = run(*GEN, env={"FLASHKIT_TP_BACKEND": "nccl"})
    clean_failure(p, "--tp 1: ranks in processes need --device cuda", "FLASHKIT_TP_BACKEND=nccl")


@pytest.mark.parametrize("cmd", [
    GEN + ["--device", "cuda", "--tp", "2"],
    ["chat", "-m", MODEL, "--device", "cuda", "--tp", "2"],
    ["serve", "-m", MODEL, "--device", "cuda", "--tp", "2", "--port", "0"],
])
def test_forced_nccl_without_nccl_or_gpus(cmd):
    # A CPU build has no NCCL; a CUDA build on a machine without 2 GPUs has too few: both refused up front.
    p = run(*cmd, env={"FLASHKIT_TP_BACKEND": "nccl"})
    clean_failure(p, "--tp 2: ")
    assert ("NCCL communicator not built" in p.stderr) or ("needs CUDA devices 0..1" in p.stderr), p.stderr


def test_launched_rank_must_agree_with_tp():
    p = run(*GEN, "--device", "cuda", "--tp", "3", env={"WORLD_SIZE": "2", "RANK": "1"})
    clean_failure(p, "--tp 3: this process was launched as one of WORLD_SIZE=2 ranks")
    p = run(*GEN, "--tp", "2", env={"WORLD_SIZE": "2", "RANK": "1"})
    clean_failure(p, "--tp 2: ranks in processes need --device cuda", "WORLD_SIZE set")
    p = run(*GEN, "--device", "cuda", "--tp", "2", env={"WORLD_SIZE": "2", "RANK": "1",
                                                      "FLASHKIT_TP_BACKEND": "threads"})
    clean_failure(p, "FLASHKIT_TP_BACKEND=threads")


def test_threads_path_unchanged():
    one = run(*GEN)
    two = run(*GEN, "--tp", "2", env={"FLASHKIT_TP_BACKEND": "threads"})
    auto = run(*GEN, "--tp", "2")
    assert one.returncode == 0 and two.returncode == 0 and auto.returncode == 0, one.stderr + two.stderr + auto.stderr
    assert one.stdout.split() and one.stdout.split() == two.stdout.split() == auto.stdout.split()


def test_bad_backend_value_warns_and_keeps_auto():
    p = run(*GEN, "--tp", "2", env={"FLASHKIT_TP_BACKEND": "mpi"})
    assert p.returncode == 0, p.stderr
    assert "FLASHKIT_TP_BACKEND" in p.stderr
