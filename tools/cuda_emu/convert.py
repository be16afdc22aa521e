"""Rewrites a CUDA source for the CPU emulation of tools/cuda_emu/cuda_runtime.h: `kernel<<<grid, block, smem,
stream>>>(args);` becomes `emu_launch(dim3(grid), dim3(block), smem, [&] { kernel(args); });` and `extern __shared__
T name[];` a pointer into the running block's emulated dynamic shared memory.  Usage: convert.py IN.cu OUT.cpp"""
import re
import sys


def split_top(s):
    """Splits at commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def launch(m):
    cfg = split_top(m.group(2))
    while len(cfg) < 3:
        cfg.append("0")
    return "emu_launch(dim3(%s), dim3(%s), %s, [&] { %s(%s); });" % (cfg[0], cfg[1], cfg[2], m.group(1), m.group(3))


src = open(sys.argv[1]).read()
src = re.sub(r"extern __shared__ (\w+) (\w+)\[\];", r"\1* \2 = reinterpret_cast<\1*>(emu_smem_ptr);", src)
src = re.sub(r"([\w:]+(?:<[^<>;]*>)?)<<<(.*?)>>>\((.*?)\);", launch, src, flags=re.S)
open(sys.argv[2], "w").write(src)
