"""Runs flashkit.cs149 problems once each at the course shapes, for Nsight Compute (tools/gpu/cs149.sh ncu):
    ncu ... python3 tools/gpu/cs149_ncu.py [PROBLEM...]      (default: all five; RK4 runs one step)"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "cs149"))
import course_reference as ref  # noqa: E402

import flashkit.cs149 as cs149  # noqa: E402

for problem in sys.argv[1:] or list(ref.SHAPES):
    data = ref.make_input(problem)
    if problem == "rk4":
        data = data[:5] + (1,)  # one step: the four stage kernels once each
    torch.cuda.nvtx.range_push(problem)
    getattr(cs149, problem)(data)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    del data
    torch.cuda.empty_cache()
