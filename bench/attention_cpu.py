#!/usr/bin/python3
"""CPU attention, side by side: flashkit (standard and flash, through `flashkit bench attention --json -`)
and PyTorch's math path, `softmax(q @ k^T * scale) @ v` (causal mask with --causal), forward and
forward+backward (autograd), on the same shapes, dtype and thread count, in one run of this script.

    /usr/bin/python3 bench/attention_cpu.py            # full grid -> bench/results/attention-cpu.{json,md}
    /usr/bin/python3 bench/attention_cpu.py --quick    # small grid -> bench/results/attention-cpu-quick.{json,md}

Grid (default): f32, batch 1, heads 16, head_dim 64, seqlen 1024..16384, passes fwd and fwd+bwd, plus
flash alone forward at 32768. Both sides use one memory budget, --mem-fraction (60%) of physical RAM:
PyTorch is skipped where its N x N tensors are estimated to exceed it ("skipped: needs X GB"), and
flashkit runs with FLASHKIT_MAX_WORKSPACE_BYTES set to it, so its standard implementation refuses by
itself. Timing: warmup runs, then at least 3 timed runs and about 1 s per row (at most 20), or --repeats;
medians are reported. The flashkit binary is FLASHKIT_CLI, else --cli, else ./build/bin/flashkit.
Needs Debian's /usr/bin/python3 (torch 1.13, CPU) for the PyTorch side (or --no-torch).
"""

import argparse
import datetime
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FULL_SEQLENS = [1024, 2048, 4096, 8192, 16384]
FULL_FLASH_ONLY = [32768]
QUICK_SEQLENS = [256, 512]
QUICK_FLASH_ONLY = [1024]
ADAPTIVE_SECONDS, ADAPTIVE_MIN, ADAPTIVE_MAX = 1.0, 3, 20
PASSES = ["fwd", "fwdbwd"]
PASS_LABEL = {"fwd": "fwd", "fwdbwd": "fwd+bwd", "bwd": "bwd"}
DTYPE_SIZE = {"f32": 4, "bf16": 2, "f16": 2}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def die(msg):
    log(f"attention_cpu.py: error: {msg}")
    sys.exit(2)


# --- formatting --------------------------------------------------------------------------------------------

def sig3(v):
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.1:
        return f"{v:.3f}"
    return f"{v:.4f}"


def human_bytes(b):
    if b is None:
        return "?"
    if b >= 1e9:
        return sig3(b / 1e9) + " GB"
    if b >= 1e6:
        return sig3(b / 1e6) + " MB"
    if b >= 1e3:
        return sig3(b / 1e3) + " kB"
    return f"{b:.0f} B"


# --- machine ----------------------------------------------------------------------------------------------

def physical_memory_bytes():
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def machine_info():
    info = {"cpu_model": None, "logical_cpus": os.cpu_count(), "cores": None, "sockets": None,
            "threads_per_core": None, "physical_memory_bytes": physical_memory_bytes()}
    if shutil.which("lscpu"):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, env=dict(os.environ, LC_ALL="C")).stdout
        fields = {}
        for line in out.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k.strip()] = v.strip()
        info["cpu_model"] = fields.get("Model name")
        try:
            info["sockets"] = int(fields.get("Socket(s)", "1"))
            info["cores"] = int(fields.get("Core(s) per socket", "0")) * info["sockets"] or None
            info["threads_per_core"] = int(fields.get("Thread(s) per core", "1"))
        except ValueError:
            pass
    if not info["cpu_model"]:
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        info["cpu_model"] = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
    return info


def git_commit():
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# --- flashkit through its CLI -----------------------------------------------------------------------------

def find_cli(arg):
    path = os.environ.get("FLASHKIT_CLI") or arg or os.path.join(REPO, "build", "bin", "flashkit")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        die(f"flashkit binary not found at {path}: build it (cmake -S . -B build -G Ninja && cmake --build build) "
            "or set FLASHKIT_CLI / --cli")
    return path


def flashkit_default_threads(cli):
    out = subprocess.run([cli, "info"], capture_output=True, text=True).stdout
    m = re.search(r"^threads:\s*(\d+)", out, re.M)
    return int(m.group(1)) if m else (os.cpu_count() or 1)


def run_flashkit(cli, env, seqlens, impls, passes, a):
    cmd = [cli, "bench", "attention", "--seqlen", ",".join(map(str, seqlens)), "--batch", str(a.batch),
           "--heads", str(a.heads), "--head-dim", str(a.head_dim), "--dtype", a.dtype, "--impl", ",".join(impls),
           "--pass", passes, "--threads", str(a.threads), "--warmup", str(a.warmup), "--json", "-"]
    if a.repeats:
        cmd += ["--repeats", str(a.repeats)]
    if a.causal:
        cmd.append("--causal")
    log("$ " + " ".join(cmd))
    # stderr (progress and the table) goes straight to the terminal; stdout is the JSON document.
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        die(f"flashkit bench exited with status {p.returncode}")
    return json.loads(p.stdout)


# --- PyTorch ----------------------------------------------------------------------------------------------

class PeakRss:
    """Peak resident memory above the starting point, from /proc (VmHWM reset through clear_refs). A lower
    bound: allocations glibc serves from memory freed earlier in the process do not raise it."""

    def __init__(self):
        self.ok = True
        try:
            self._reset()
        except OSError:
            self.ok = False

    @staticmethod
    def _status():
        d = {}
        with open("/proc/self/status") as f:
            for line in f:
                k, v = line.split(":", 1)
                d[k] = v
        return int(d["VmRSS"].split()[0]) * 1024, int(d["VmHWM"].split()[0]) * 1024

    @staticmethod
    def _reset():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def start(self):
        if self.ok:
            self._reset()
            self.base = self._status()[0]

    def extra(self):
        return max(0, self._status()[1] - self.base) if self.ok else None


def torch_extra_bytes(a, n, pas):
    """PyTorch's peak extra memory on the math path: 2 score-sized tensors in the forward (q@k^T, its
    scaled copy, then the softmax output), 3 with autograd (P saved, dP, dS); measured as exactly that on
    seqlen 2048 (peak RSS), where every N x N tensor is far above glibc's mmap threshold. Plus the mask."""
    scores = a.batch * a.heads * n * n * DTYPE_SIZE[a.dtype]
    return (2 if pas == "fwd" else 3) * scores + (n * n if a.causal else 0)


def torch_estimate_bytes(a, n, pas):
    """Everything the PyTorch run holds: the extra memory above, inputs, outputs and gradients."""
    io = a.batch * n * a.heads * a.head_dim * DTYPE_SIZE[a.dtype]
    return torch_extra_bytes(a, n, pas) + (5 if pas == "fwd" else 8) * io


def time_runs(fn, warmup, repeats, peak=None):
    """Warmup runs, then timed runs (adaptive count unless `repeats`); peak memory over the first timed run."""
    for _ in range(warmup):
        fn()
    times = []

    def timed():
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)

    if peak is not None:
        peak.start()
    timed()
    peak_extra = peak.extra() if peak is not None else None
    n = repeats or int(min(ADAPTIVE_MAX, max(ADAPTIVE_MIN, math.ceil(ADAPTIVE_SECONDS / max(times[0] / 1e3, 1e-6)))))
    while len(times) < n:
        timed()
    return times, peak_extra


def run_torch(torch, a, n, pas, budget):
    row = {"impl": "torch", "seqlen": n, "pass": pas, "status": "ok", "message": "", "median_ms": None,
           "min_ms": None, "gflops": None, "flops": None, "peak_rss_extra_bytes": None}
    need = torch_estimate_bytes(a, n, pas)
    row["estimated_bytes"] = need
    row["workspace_bytes"] = torch_extra_bytes(a, n, pas)
    if need > budget:
        row["status"] = "skipped"
        row["message"] = f"needs {human_bytes(need)}"
        return row
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    gen = torch.Generator().manual_seed(n)

    def rand():  # uniform in +-[0.05, 1), as flashkit's bench; [batch, heads, seqlen, head_dim], torch's layout
        mag = 0.05 + 0.95 * torch.rand(a.batch, a.heads, n, a.head_dim, generator=gen)
        sign = torch.randint(0, 2, mag.shape, generator=gen) * 2 - 1
        return (mag * sign).to(dt)

    q, k, v, dout = rand(), rand(), rand(), rand()
    scale = a.head_dim ** -0.5
    mask = torch.ones(n, n, dtype=torch.bool).triu(1) if a.causal else None

    def attention(q, k, v):
        s = q @ k.transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    if pas == "fwd":
        def fn():
            with torch.no_grad():
                attention(q, k, v)
        flops = 4.0 * a.batch * a.heads * n * n * a.head_dim  # QK^T and PV
    else:
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))

        def fn():
            qg.grad = kg.grad = vg.grad = None
            attention(qg, kg, vg).backward(dout)
        flops = 12.0 * a.batch * a.heads * n * n * a.head_dim  # + dP, dV, dQ, dK

    try:
        times, row["peak_rss_extra_bytes"] = time_runs(fn, a.warmup, a.repeats, PeakRss())
    except RuntimeError as e:  # e.g. a dtype PyTorch's CPU kernels lack
        row["status"] = "error"
        row["message"] = str(e).splitlines()[0]
        return row
    times_sorted = sorted(times)
    med = times_sorted[len(times) // 2] if len(times) % 2 else 0.5 * (times_sorted[len(times) // 2 - 1] +
                                                                        times_sorted[len(times) // 2])
    row.update(median_ms=med, min_ms=min(times), times_ms=times, repeats=len(times), flops=flops,
               gflops=flops / (med * 1e-3) / 1e9)
    return row


# --- report -----------------------------------------------------------------------------------------------

def status_cell(r):
    if r is None:
        return "—"
    if r["status"] == "ok":
        return sig3(r["median_ms"])
    m = re.search(r"needs ([\d.]+ ?[kMG]?B)", r.get("message") or "")
    return r["status"] + (f" (needs {m.group(1)})" if m else "")


def merge(flashkit_docs, torch_rows, grid):
    fk = {}
    for doc in flashkit_docs:
        for r in doc["rows"]:
            fk[(r["seqlen"], r["pass"], r["impl"])] = r
    th = {(r["seqlen"], r["pass"]): r for r in torch_rows}
    rows = []
    for n, pas in grid:
        t, s, f = th.get((n, pas)), fk.get((n, pas, "standard")), fk.get((n, pas, "flash"))
        ok = lambda r: r is not None and r["status"] == "ok"  # noqa: E731
        rows.append({
            "seqlen": n, "pass": pas, "torch": t, "standard": s, "flash": f,
            "flash_vs_standard": s["median_ms"] / f["median_ms"] if ok(s) and ok(f) else None,
            "flash_vs_torch": t["median_ms"] / f["median_ms"] if ok(t) and ok(f) else None,
        })
    return rows


def markdown(meta, rows):
    m = meta["machine"]
    cores = f"{m['cores']} cores, " if m.get("cores") else ""
    c = meta["config"]
    lines = [
        "# CPU attention: flashkit vs PyTorch",
        "",
        f"- machine: {m['cpu_model']}, {cores}{m['logical_cpus']} logical CPUs, "
        f"{human_bytes(m['physical_memory_bytes'])} RAM",
        f"- date: {meta['date']}",
        f"- git commit: {meta['git_commit']}",
        f"- flashkit: {meta['flashkit_build']}",
        f"- PyTorch: {meta['torch_version'] or 'not run'}",
        f"- shapes: batch {c['batch']}, heads {c['heads']}, head_dim {c['head_dim']}, {c['dtype']}, "
        f"{'causal' if c['causal'] else 'non-causal'}; threads {c['threads']} (both)",
        f"- timing: warmup {c['warmup']}, then "
        + (f"{c['repeats']} runs" if c["repeats"] else "at least 3 runs and ~1 s per row (at most 20)")
        + "; median ms",
        f"- memory budget: {meta['memory_budget_fraction']:.0%} of RAM = {human_bytes(meta['memory_budget_bytes'])} "
        f"(PyTorch skipped above its estimate; flashkit run with FLASHKIT_MAX_WORKSPACE_BYTES="
        f"{meta['flashkit_max_workspace_bytes']})",
        f"- command: `{meta['command']}`",
        "",
        "| seqlen | pass | torch ms | standard ms | flash ms | flash vs standard | flash vs torch "
        "| GFLOP/s torch / std / flash | modelled bytes std / flash | peak extra mem torch (est.) / std / flash |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def g(r, key, fmt):
        return fmt(r[key]) if r is not None and r["status"] == "ok" and r.get(key) is not None else "—"

    for r in rows:
        t, s, f = r["torch"], r["standard"], r["flash"]
        moved = lambda x: human_bytes(x["bytes_read"] + x["bytes_written"])  # noqa: E731
        lines.append("| " + " | ".join([
            str(r["seqlen"]), PASS_LABEL[r["pass"]], status_cell(t), status_cell(s), status_cell(f),
            f"{r['flash_vs_standard']:.2f}x" if r["flash_vs_standard"] else "—",
            f"{r['flash_vs_torch']:.2f}x" if r["flash_vs_torch"] else "—",
            " / ".join(g(x, "gflops", sig3) for x in (t, s, f)),
            " / ".join(moved(x) if x is not None and x["status"] == "ok" else "—" for x in (s, f)),
            " / ".join(g(x, "workspace_bytes", human_bytes) for x in (t, s, f)),
        ]) + " |")
    lines += [
        "",
        "Notes:",
        "- torch: `softmax(q @ k^T * scale) @ v` on `[batch, heads, seqlen, head_dim]` tensors; fwd under "
        "`torch.no_grad()`, fwd+bwd through autograd (`backward(dout)`).",
        "- GFLOP/s count the matrix-product FLOPs each implementation executes: torch 4·N²·d per head forward, "
        "12·N²·d forward+backward; flashkit as its `OpCost` reports (standard's backward recomputes S, 14·N²·d; "
        "flash skips fully masked tiles when causal).",
        "- modelled bytes: bytes read + written to main memory under each flashkit kernel's cost model (`OpCost`).",
        "- peak extra memory: flashkit's `OpCost.workspace_bytes` (for fwd+bwd the larger of the two calls); "
        "torch's N×N tensors: 2 score-sized tensors forward, 3 forward+backward (what peak RSS shows at seqlen "
        "2048; the JSON has each row's RSS reading, a lower bound).",
        "- refused: flashkit declined before allocating (workspace over the budget); skipped: PyTorch's "
        "estimated peak is over the budget; —: not part of the grid (the last rows time flash alone).",
    ]
    errors = sorted({r["torch"]["message"] for r in rows if r["torch"] and r["torch"]["status"] == "error"})
    lines += [f"- torch error: {e}" for e in errors]
    return "\n".join(lines) + "\n"


# --- main -------------------------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    p.add_argument("--quick", action="store_true", help="small grid (seqlen 256, 512; flash alone at 1024; heads 4)")
    p.add_argument("--seqlen", type=ints, help="comma list (default 1024,2048,4096,8192,16384)")
    p.add_argument("--flash-only-seqlen", type=ints, help="flash forward alone at these (default 32768)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, help="default 16 (4 with --quick)")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--threads", type=int, help="threads for both (default: flashkit's default)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, help="timed runs per row (default adaptive: >= 3, ~1 s, <= 20)")
    p.add_argument("--mem-fraction", type=float, default=0.6, help="memory budget as a fraction of RAM (0.6)")
    p.add_argument("--no-torch", action="store_true", help="flashkit only")
    p.add_argument("--cli", help="flashkit binary (FLASHKIT_CLI wins; default ./build/bin/flashkit)")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results"), help="output directory")
    a = p.parse_args()
    if a.seqlen is None:
        a.seqlen = QUICK_SEQLENS if a.quick else FULL_SEQLENS
    if a.flash_only_seqlen is None:
        a.flash_only_seqlen = QUICK_FLASH_ONLY if a.quick else FULL_FLASH_ONLY
    if a.heads is None:
        a.heads = 4 if a.quick else 16
    for name in ("batch", "heads", "head_dim"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.repeats is not None and a.repeats < 1:
        p.error("--repeats must be >= 1")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if not 0 < a.mem_fraction <= 1:
        p.error("--mem-fraction must be in (0, 1]")
    if any(n < 1 for n in a.seqlen + a.flash_only_seqlen):
        p.error("sequence lengths must be >= 1")
    return a


def main():
    a = parse_args()
    torch = None
    if not a.no_torch:
        try:
            import torch  # noqa: F811
        except ImportError:
            die(f"PyTorch is not importable by {sys.executable}; run with /usr/bin/python3 (Debian's python3-torch) "
                "or pass --no-torch")
    cli = find_cli(a.cli)
    a.threads = a.threads or flashkit_default_threads(cli)
    ram = physical_memory_bytes()
    budget = int(a.mem_fraction * ram)
    env = dict(os.environ)
    env.setdefault("FLASHKIT_MAX_WORKSPACE_BYTES", str(budget))

    started = time.time()
    docs = [run_flashkit(cli, env, a.seqlen, ["standard", "flash"], "all", a)]
    extra = [n for n in a.flash_only_seqlen if n not in a.seqlen]
    if extra:
        docs.append(run_flashkit(cli, env, extra, ["flash"], "fwd", a))

    torch_rows = []
    if torch is not None:
        torch.set_num_threads(a.threads)
        jobs = [(n, pas) for n in a.seqlen for pas in PASSES]
        for i, (n, pas) in enumerate(jobs, 1):
            log(f"[{i}/{len(jobs)}] torch {PASS_LABEL[pas]} seqlen={n} ...")
            r = run_torch(torch, a, n, pas, budget)
            if r["status"] != "ok":
                log(f"    {r['status']}: {r['message']}")
            else:
                log(f"    median {sig3(r['median_ms'])} ms over {r['repeats']} runs")
            torch_rows.append(r)
        for n in extra:  # flash-alone rows: say what PyTorch would need, without running it
            need = torch_estimate_bytes(a, n, "fwd")
            if need > budget:
                torch_rows.append({"impl": "torch", "seqlen": n, "pass": "fwd", "status": "skipped",
                                   "message": f"needs {human_bytes(need)}", "estimated_bytes": need})

    grid = [(n, pas) for n in a.seqlen for pas in PASSES] + [(n, "fwd") for n in extra]
    rows = merge(docs, torch_rows, grid)
    meta = {
        "machine": machine_info(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git_commit(),
        "flashkit_build": docs[0]["build"],
        "flashkit_cli": cli,
        "torch_version": torch.__version__ if torch is not None else None,
        "config": {"seqlens": a.seqlen, "flash_only_seqlens": extra, "batch": a.batch, "heads": a.heads,
                   "head_dim": a.head_dim, "causal": a.causal, "dtype": a.dtype, "threads": a.threads,
                   "warmup": a.warmup, "repeats": a.repeats, "quick": a.quick},
        "memory_budget_fraction": a.mem_fraction,
        "memory_budget_bytes": budget,
        "flashkit_max_workspace_bytes": int(env["FLASHKIT_MAX_WORKSPACE_BYTES"]),
        "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
        "wall_seconds": round(time.time() - started, 1),
    }
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, "attention-cpu-quick" if a.quick else "attention-cpu")
    with open(stem + ".json", "w") as f:
        json.dump({**meta, "rows": rows, "flashkit_runs": docs, "torch_rows": torch_rows}, f, indent=2)
        f.write("\n")
    md = markdown(meta, rows)
    with open(stem + ".md", "w") as f:
        f.write(md)
    print(md)
    log(f"wrote {stem}.json and {stem}.md ({meta['wall_seconds']} s)")


if __name__ == "__main__":
    main()
