"""Runs one flashkit.cs149 problem once at the course shape, for Nsight Compute (tools/gpu/cs149.sh ncu):
    ncu ... python3 tools/gpu/cs149_ncu.py PROBLEM"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "cs149"))
import course_reference as ref  # noqa: E402

import flashkit.cs149 as cs149  # noqa: E402

problem = sys.argv[1]
data = ref.make_input(problem)
if problem == "rk4":
    data = data[:5] + (1,)  # one step: the four stage kernels once each
getattr(cs149, problem)(data)
torch.cuda.synchronize()
