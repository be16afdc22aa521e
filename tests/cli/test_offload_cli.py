"""--offload-layers / --gpu-memory (CPU offload of weights on CUDA; docs/serving.md "CPU offload") on the command
line: bad values and the CPU device are refused with one line naming the option and exit status 2. The offloaded
runs themselves need a GPU (tests/engine/test_cuda_offload.cpp, tools/gpu/offload.sh)."""
import os

import pytest

from test_cli import REPO, assert_clean_failure, run

LLAMA = os.path.join(REPO, "tests", "data", "models", "tiny-llama")
GEN = ["generate", "-m", LLAMA, "--prompt-ids", "1,2,3", "-n", "2", "--ids", "-q"]


@pytest.mark.parametrize("args,names", [
    (["--offload-layers", "-1"], ["--offload-layers"]),
    (["--offload-layers", "two"], ["--offload-layers"]),
    (["--gpu-memory", "12X"], ["--gpu-memory", "12X"]),
    (["--gpu-memory", "0"], ["--gpu-memory"]),
    (["--gpu-memory", "-4G"], ["--gpu-memory"]),
    (["--gpu-memory", "nan"], ["--gpu-memory"]),
    (["--offload-layers", "2"], ["--offload-layers", "--device cuda"]),        # the CPU device
    (["--gpu-memory", "1G"], ["--gpu-memory", "--device cuda"]),
    (["--offload-layers", "1", "--gpu-memory", "1G"], ["--offload-layers", "--gpu-memory"]),
])
def test_generate_offload_errors(args, names):
    p = run(*GEN, *args)
    assert p.returncode == 2, p.stderr
    assert_clean_failure(p, *names)


def test_serve_offload_on_cpu_refused():
    tok = os.path.join(REPO, "tests", "data", "tokenizers", "tiny_bytelevel")
    p = run("serve", "-m", LLAMA, "--tokenizer", tok, "--port", "0", "--offload-layers", "1")
    assert p.returncode == 2, p.stderr
    assert_clean_failure(p, "--offload-layers")


def test_zero_offload_is_a_plain_run():
    p = run(*GEN, "--offload-layers", "0")
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.split()) == 2
