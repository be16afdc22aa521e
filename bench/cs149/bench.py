"""CS149 problems at the course shapes on the GPU: flashkit.cs149 against the PyTorch reference (eager and
torch.compile; SDPA too for attention) in one process. Each run is timed with CUDA events after the L2 cache is
flushed (a 256 MiB buffer written), as the course harness does; the median of the runs is reported. flashkit's
output is checked against the eager reference with the course's tolerances first.

    PYTHONPATH=python python3 bench/cs149/bench.py [--problems histogram,swiglu] [--runs 10] [--no-compile]
        [--json OUT.json]
Prints one line per measurement and a table at the end; exit status 1 if a flashkit result fails its check."""

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import course_reference as ref  # noqa: E402

import flashkit.cs149 as cs149  # noqa: E402

GOALS_MS = {"histogram": 0.5, "swiglu": 6.0, "rk4": 40.0, "flashattention": 12.0, "occupancy_decoder": 1.9}
# Course tolerances (rtol, atol); None: exact.
TOLERANCES = {"histogram": None, "swiglu": (1e-2, 1e-2), "rk4": (1e-6, 1e-6), "flashattention": (1e-2, 1e-2),
              "occupancy_decoder": (1e-2, 1e-2)}
_FLUSH = None


def flush_l2():
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    _FLUSH.zero_()


def time_ms(fn, data, runs, budget_s):
    """Median of CUDA-event times, one flushed-L2 run each; fewer runs when one run is slow (budget_s in all)."""
    fn(data)  # warm-up (and compilation)
    torch.cuda.synchronize()
    times = []
    t_start = time.time()
    for i in range(runs):
        flush_l2()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(data)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
        if i >= 2 and time.time() - t_start > budget_s:
            break
    return statistics.median(times), len(times)


def check(problem, got, want):
    tol = TOLERANCES[problem]
    if tol is None:
        ok = torch.equal(got, want)
        return ok, "exact" if ok else "%d counts differ" % int((got != want).sum())
    rtol, atol = tol
    got_f, want_f = got.float(), want.float()
    bad = ((got_f - want_f).abs() > atol + rtol * want_f.abs()) | (got_f.isnan() != want_f.isnan())
    err = (got_f - want_f).abs().max().item()
    return (not bool(bad.any())), "allclose(rtol=%g, atol=%g): %d outside, max |diff| %.3g" % (
        rtol, atol, int(bad.sum()), err)


def candidates(problem, data, use_compile):
    if problem == "occupancy_decoder":
        queries, latents, w = data
        width, heads = latents.shape[-1], ref.SHAPES[problem]["heads"]
        module = ref.OccupancyDecoder(w, width, heads)
        eager = lambda d: module(d[0], d[1])  # noqa: E731
        out = {"flashkit": cs149.occupancy_decoder, "eager": eager}
        if use_compile:
            compiled = torch.compile(module)
            out["compile"] = lambda d: compiled(d[0], d[1])
        return out
    fn = {"histogram": ref.histogram, "swiglu": ref.swiglu, "rk4": ref.rk4, "flashattention": ref.attention}[problem]
    out = {"flashkit": getattr(cs149, problem), "eager": fn}
    if use_compile:
        out["compile"] = torch.compile(fn)
    if problem == "flashattention":
        out["sdpa"] = ref.attention_sdpa
    # A/B variants, timed and checked beside the default as out["flashkit_<name>"] (docs/worklog/cs149-*.md):
    # every kernel the default does not pick, so a run answers whether a new version is correct and faster. None
    # now: run s10-10 promoted RK4 v4 and retired RK4 v1, v5, v6 and SwiGLU v3 (dev/cuda/).
    return out


def time_steps(data, runs):
    """The occupancy decoder's steps (cs149.occupancy_decoder_steps) timed inside whole forward passes: CUDA events
    between the steps of one pass, L2 flushed before each pass; median per step over the runs."""
    per_step = {}
    for i in range(runs + 1):  # the first pass warms up
        steps = cs149.occupancy_decoder_steps(data)
        flush_l2()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(steps) + 1)]
        state = {}
        events[0].record()
        for (name, step), ev in zip(steps, events[1:]):
            step(state)
            ev.record()
        torch.cuda.synchronize()
        if i:
            for j, (name, _) in enumerate(steps):
                per_step.setdefault(name, []).append(events[j].elapsed_time(events[j + 1]))
    return {name: statistics.median(t) for name, t in per_step.items()}


def kernel_split(fn, data):
    """One call of fn under torch.profiler (after the timed runs: warm): the CUDA kernels it launched, summed and the
    three longest, against the call's CUDA-event time. Says whether time goes outside the kernels (copies, gaps)."""
    from torch.profiler import ProfilerActivity, profile
    flush_l2()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(data)
        end.record()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "memset" not in e.name.lower():
            kernels[e.name] = kernels.get(e.name, 0.0) + e.time_range.elapsed_us() / 1000.0  # us -> ms
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:3]
    return {"event_ms": start.elapsed_time(end), "kernels_ms": sum(kernels.values()),
            "top": [(name[:60], ms) for name, ms in top]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", default=",".join(GOALS_MS))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=8.0, help="time budget per measurement")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--kernel-split", action="store_true",
                    help="also profile one flashkit call: kernel time vs event time (torch.profiler)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False  # the references in f32, as the course runs them
    results, failed = [], False
    for problem in args.problems.split(","):
        data = ref.make_input(problem)
        fns = candidates(problem, data, not args.no_compile)
        want = fns["eager"](data)
        ok, detail = check(problem, fns["flashkit"](data), want)
        failed |= not ok
        print("%s: flashkit %s (%s)" % (problem, "OK" if ok else "FAILED", detail), flush=True)
        row = {"problem": problem, "shape": ref.SHAPES[problem], "check_ok": ok, "check": detail,
               "goal_ms": GOALS_MS[problem]}
        for name in [n for n in fns if n.startswith("flashkit_")]:  # the A/B variants are checked too
            v_ok, v_detail = check(problem, fns[name](data), want)
            failed |= not v_ok
            print("%s: %s %s (%s)" % (problem, name, "OK" if v_ok else "FAILED", v_detail), flush=True)
            row[name + "_check_ok"] = v_ok
            row[name + "_check"] = v_detail
        for name, fn in fns.items():
            try:
                ms, n = time_ms(fn, data, args.runs, args.budget_s)
            except Exception as e:  # a baseline that fails (e.g. torch.compile) is reported, not fatal
                print("%s %s: failed: %s" % (problem, name, str(e).splitlines()[0][:200]), flush=True)
                continue
            row[name + "_ms"] = ms
            print("%s %s: %.3f ms (median of %d)" % (problem, name, ms, n), flush=True)
        if args.kernel_split:
            try:
                row["kernel_split"] = split = kernel_split(fns["flashkit"], data)
                print("%s flashkit kernels: %.3f ms of %.3f ms (event); longest: %s" % (
                    problem, split["kernels_ms"], split["event_ms"],
                    ", ".join("%s %.3f" % kv for kv in split["top"])), flush=True)
            except Exception as e:  # the profiler is a diagnostic, not a result
                print("%s kernel split failed: %s" % (problem, str(e).splitlines()[0][:200]), flush=True)
        if problem == "occupancy_decoder":
            row["steps_ms"] = time_steps(data, args.runs)
            print("%s flashkit steps: %s" % (problem, ", ".join("%s %.3f ms" % kv for kv in row["steps_ms"].items())),
                  flush=True)
        base = [row[k] for k in ("eager_ms", "compile_ms", "sdpa_ms") if k in row]
        if "flashkit_ms" in row and base:
            row["speedup_vs_best_torch"] = min(base) / row["flashkit_ms"]
        results.append(row)
        del data, fns, want
        torch.cuda.empty_cache()
        if args.json:  # after every problem, so a run cut short keeps what it measured
            write_json(args.json, results)
    print("\n| problem | flashkit ms | eager ms | compile ms | sdpa ms | speedup vs best torch | goal ms | check |")
    print("|---|---|---|---|---|---|---|---|")
    f = lambda r, k: ("%.3f" % r[k]) if k in r else "-"  # noqa: E731
    for r in results:
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["problem"], f(r, "flashkit_ms"), f(r, "eager_ms"), f(r, "compile_ms"), f(r, "sdpa_ms"),
            ("%.2fx" % r["speedup_vs_best_torch"]) if "speedup_vs_best_torch" in r else "-", r["goal_ms"],
            "OK" if r["check_ok"] else "FAILED"))
    print("\n" + "\n".join(variant_table(results)))
    return 1 if failed else 0


def variant_table(results):
    """The markdown table of the default (flashkit_ms, checked as check_ok) and each A/B variant (flashkit_<name>_ms,
    checked as flashkit_<name>_check_ok) per problem, with its speed relative to the default."""
    lines = ["| problem | variant | ms | vs default | check |", "|---|---|---|---|---|"]
    for r in results:
        for key in [k for k in r if k.startswith("flashkit") and k.endswith("_ms")]:
            name = key[:-3]
            label, ok_key = ("default", "check_ok") if name == "flashkit" else (name[len("flashkit_"):],
                                                                                  name + "_check_ok")
            lines.append("| %s | %s | %.3f | %s | %s |" % (
                r["problem"], label, r[key], ("%.2fx" % (r["flashkit_ms"] / r[key])) if "flashkit_ms" in r else "-",
                "OK" if r.get(ok_key) else "FAILED"))
    return lines


def write_json(path, results):
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}
    with open(path, "w") as fh:
        json.dump(meta, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
