"""GPU time of a call as the benchmarks in bench/cuda measure it: CUDA events around each call after a warm-up,
the median of `reps` calls (METHOD.md: median of many runs, never one)."""
import torch


def timeit(fn, reps, warmup=3):
    """Median milliseconds of fn() over `reps` calls, each between two CUDA events, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]
