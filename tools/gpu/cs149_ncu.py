"""Runs flashkit.cs149 problems once each at the course shapes, for Nsight Compute (tools/gpu/cs149.sh ncu, ncu_ab):
    ncu ... python3 tools/gpu/cs149_ncu.py [PROBLEM[:KERNEL]...]
Default: all five with their default kernels. PROBLEM:KERNEL runs a kernel of swiglu or rk4 by its Python name
(e.g. swiglu:split_per_fragment, rk4:l1_aligned). RK4 runs one step (its four stage kernels once each)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "cs149"))
import course_reference as ref  # noqa: E402

import flashkit.cs149 as cs149  # noqa: E402

for arg in sys.argv[1:] or list(ref.SHAPES):
    problem, _, kernel = arg.partition(":")
    data = ref.make_input(problem)
    if problem == "rk4":
        data = data[:5] + (1,)  # one step: the four stage kernels once each
    fn = getattr(cs149, problem)
    torch.cuda.nvtx.range_push(arg)
    if kernel:
        fn(data, kernel=kernel)
    else:
        fn(data)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    del data
    torch.cuda.empty_cache()
