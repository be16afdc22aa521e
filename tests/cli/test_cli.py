"""Tests of the flashkit command-line tool (run by ctest with FLASHKIT_CLI=<path to the binary>).

Every invocation runs as a subprocess; bad flags must fail with a non-zero exit status and a short
message on stderr that names the flag, never a crash, a C++ `terminate` or a Python traceback.
"""
import glob
import json
import os
import resource
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--seqlen", "64", "--heads", "2", "--head-dim", "32", "--repeats", "1"]


def _find_cli():
    path = os.environ.get("FLASHKIT_CLI")
    if path:
        return path
    found = sorted(glob.glob(os.path.join(REPO, "build*", "bin", "flashkit")), key=os.path.getmtime)
    if not found:
        raise RuntimeError("set FLASHKIT_CLI to the flashkit binary (no build*/bin/flashkit found)")
    return found[-1]


CLI = _find_cli()


def run(*args, timeout=60):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def assert_clean_failure(proc, *names):
    """Non-zero exit by the program itself (not a signal), a message on stderr naming each of `names`."""
    assert proc.returncode > 0, f"expected a failure, got exit status {proc.returncode}\n{proc.stderr}"
    assert proc.returncode < 128, f"exit status {proc.returncode} looks like a crash\n{proc.stderr}"
    err = proc.stderr
    for bad in ("Traceback", "terminate called", "Segmentation", "Aborted", "core dumped"):
        assert bad not in err, err
    assert err.strip(), "expected an error message on stderr"
    assert len(err.strip().splitlines()) <= 3, f"expected a short error, got:\n{err}"
    for name in names:
        assert name in err, f"stderr does not name {name!r}:\n{err}"


def table_rows(text):
    """Rows of the bench table: the lines after the dashed rule that are not comments."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("----"))
    return [line.split() for line in lines[rule + 1:] if line.strip() and not line.startswith("#")]


def cuda_devices():
    out = run("info").stdout
    for line in out.splitlines():
        if line.startswith("cuda devices"):
            return int(line.split(":")[1])
    return 0


# --- help, version, info -------------------------------------------------------------------------------

def test_help():
    p = run("--help")
    assert p.returncode == 0, p.stderr
    assert "bench" in p.stdout and "info" in p.stdout


def test_bench_attention_help_lists_options():
    p = run("bench", "attention", "--help")
    assert p.returncode == 0, p.stderr
    for opt in ("--seqlen", "--batch", "--heads", "--kv-heads", "--head-dim", "--causal", "--dtype", "--impl",
                "--pass", "--warmup", "--repeats", "--threads", "--json", "--device"):
        assert opt in p.stdout, opt


def test_version():
    p = run("--version")
    assert p.returncode == 0
    assert p.stdout.strip()


def test_info():
    p = run("info")
    assert p.returncode == 0, p.stderr
    assert "flashkit" in p.stdout
    assert "cpu isa" in p.stdout and "threads" in p.stdout


# --- bench attention ------------------------------------------------------------------------------------

def test_bench_tiny_prints_a_row_per_impl_and_pass():
    p = run("bench", "attention", *TINY)
    assert p.returncode == 0, p.stderr
    assert "flashkit" in p.stdout.splitlines()[0]  # header with build info
    rows = table_rows(p.stdout)
    got = sorted((r[0], r[3]) for r in rows)
    assert got == sorted([("standard", "fwd"), ("flash", "fwd"), ("standard", "fwd+bwd"), ("flash", "fwd+bwd")])
    for r in rows:
        assert r[2] == "64"
        assert r[1].startswith("cpu." + r[0]), r
        assert float(r[4]) > 0 and float(r[5]) > 0 and float(r[6]) > 0
    flash = [r for r in rows if r[0] == "flash"]
    assert all(r[-1].endswith("x") for r in flash)  # speedup vs standard
    assert "[1/4]" in p.stderr and "[4/4]" in p.stderr  # progress


def test_bench_all_impls_json_file(tmp_path):
    out = tmp_path / "bench.json"
    p = run("bench", "attention", *TINY, "--impl", "reference,standard,flash", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert len(table_rows(p.stdout)) == 6
    doc = json.loads(out.read_text())
    for key in ("device", "build", "date", "config", "rows"):
        assert key in doc, key
    assert doc["device"] == "cpu"
    cfg = doc["config"]
    assert cfg["seqlens"] == [64] and cfg["heads"] == 2 and cfg["kv_heads"] == 2 and cfg["head_dim"] == 32
    assert cfg["impls"] == ["reference", "standard", "flash"] and cfg["passes"] == ["fwd", "fwdbwd"]
    rows = doc["rows"]
    assert len(rows) == 6
    assert {(r["impl"], r["pass"]) for r in rows} == {
        (i, p) for i in ("reference", "standard", "flash") for p in ("fwd", "fwdbwd")}
    for r in rows:
        for key in ("impl", "kernel", "seqlen", "pass", "median_ms", "min_ms", "gflops", "bytes_read",
                    "bytes_written", "workspace_bytes", "status", "message"):
            assert key in r, key
        assert r["status"] == "ok", r
        assert r["seqlen"] == 64
        assert r["median_ms"] >= r["min_ms"] > 0
        assert r["gflops"] > 0 and r["bytes_read"] > 0 and r["bytes_written"] > 0
        assert r["workspace_bytes"] >= 0
        assert r["repeats"] == 1
    fwd = {r["impl"]: r for r in rows if r["pass"] == "fwd"}
    both = {r["impl"]: r for r in rows if r["pass"] == "fwdbwd"}
    # forward+backward counts the forward's FLOPs and the backward's on top
    assert both["flash"]["gflops"] * both["flash"]["median_ms"] > fwd["flash"]["gflops"] * fwd["flash"]["median_ms"]
    assert fwd["standard"]["speedup_vs_standard"] is None
    assert fwd["flash"]["speedup_vs_standard"] > 0


def test_bench_json_to_stdout_is_pure_json():
    p = run("bench", "attention", *TINY, "--pass", "fwd", "--json", "-")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [r["impl"] for r in doc["rows"]] == ["standard", "flash"]
    assert "seqlen" in p.stderr  # the table went to stderr


def test_bench_variants_gqa_causal_bf16_bwd(tmp_path):
    out = tmp_path / "b.json"
    p = run("bench", "attention", "--seqlen", "48,96", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
            "--causal", "--dtype", "bf16", "--pass", "bwd", "--repeats", "2", "--warmup", "0", "--threads", "1",
            "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["config"]["causal"] is True and doc["config"]["dtype"] == "bf16" and doc["config"]["threads"] == 1
    assert [(r["seqlen"], r["impl"], r["pass"]) for r in doc["rows"]] == [
        (48, "standard", "bwd"), (48, "flash", "bwd"), (96, "standard", "bwd"), (96, "flash", "bwd")]
    assert all(r["status"] == "ok" and r["repeats"] == 2 for r in doc["rows"])


def test_standard_refused_at_32768_without_allocating():
    p = run("bench", "attention", "--impl", "standard", "--pass", "fwd", "--heads", "16", "--seqlen", "32768",
            timeout=120)
    assert p.returncode == 0, p.stderr
    rows = table_rows(p.stdout)
    assert len(rows) == 1
    assert "refused" in p.stdout
    assert "workspace" in p.stdout  # the library's reason
    # q, k, v, o at 32768 x 16 x 64 f32 are 134 MB each; the N x N matrices would be 68.7 GB.
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert peak_kib < 2 * 1024 * 1024, f"peak RSS {peak_kib} KiB"


def test_refused_row_in_json_and_others_still_run():
    # A workspace limit between flash's (linear in seqlen) and standard's (N x N) makes standard refuse
    # while flash still runs.
    args = ["bench", "attention", "--seqlen", "512", "--heads", "8", "--head-dim", "32", "--repeats", "1",
            "--pass", "fwd", "--json", "-"]
    p = run(*args)
    assert p.returncode == 0, p.stderr
    ws = {r["impl"]: r["workspace_bytes"] for r in json.loads(p.stdout)["rows"]}
    assert ws["flash"] < ws["standard"], ws
    env = dict(os.environ, FLASHKIT_MAX_WORKSPACE_BYTES=str(int((ws["flash"] + ws["standard"]) / 2)))
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    rows = {r["impl"]: r for r in json.loads(p.stdout)["rows"]}
    assert rows["standard"]["status"] == "refused"
    assert rows["standard"]["median_ms"] is None and "workspace" in rows["standard"]["message"]
    assert rows["flash"]["status"] == "ok" and rows["flash"]["median_ms"] > 0
    assert rows["flash"]["speedup_vs_standard"] is None
    assert "refused" in p.stderr  # the table, on stderr with --json -


# --- bad input ------------------------------------------------------------------------------------------

BAD_FLAGS = [
    (["--seqlen", "0"], "--seqlen"),
    (["--seqlen", "abc"], "--seqlen"),
    (["--seqlen", "64,-5"], "--seqlen"),
    (["--head-dim", "12"], "--head-dim"),
    (["--head-dim", "512"], "--head-dim"),
    (["--heads", "6", "--kv-heads", "4"], "--kv-heads"),
    (["--dtype", "f64"], "--dtype"),
    (["--impl", "foo"], "--impl"),
    (["--impl", "flash,foo"], "--impl"),
    (["--batch", "0"], "--batch"),
    (["--pass", "xyz"], "--pass"),
    (["--repeats", "-1"], "--repeats"),
    (["--repeats", "0"], "--repeats"),
    (["--warmup", "-1"], "--warmup"),
    (["--threads", "0"], "--threads"),
    (["--device", "tpu"], "--device"),
    (["--json", "/nonexistent-dir/x.json"], "--json"),
    (["--bogus"], "--bogus"),
    (["--pass"], "--pass"),
]


def with_tiny(args):
    """`args` on top of the tiny sizes (those flags of TINY that `args` does not set itself)."""
    base = [TINY[i:i + 2] for i in range(0, len(TINY), 2)]
    return [x for flag, val in base if flag not in args for x in (flag, val)] + list(args)


@pytest.mark.parametrize("args,name", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flag_fails_cleanly(args, name):
    p = run("bench", "attention", *with_tiny(args))  # tiny sizes, in case a flag were wrongly accepted
    assert_clean_failure(p, name)
    assert "median" not in p.stdout  # nothing ran


def test_inputs_too_large_fail_before_allocating():
    p = run("bench", "attention", "--seqlen", "4194304", "--heads", "4096", "--head-dim", "256", "--repeats", "1")
    assert_clean_failure(p, "--seqlen")
    assert "GB" in p.stderr


def test_bench_ssm_rows_per_isa_and_json(tmp_path):
    out = tmp_path / "ssm.json"
    p = run("bench", "ssm", "--seqlen", "70", "--d-inner", "40", "--d-state", "5", "--repeats", "2", "--reference",
            "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert doc["shape"] == {"batch": 1, "seqlen": 70, "d_inner": 40, "d_state": 5, "width": 4}
    for op in ("scan", "conv1d"):
        impls = [r["impl"] for r in rows if r["op"] == op]
        assert impls[0] == "ref.f64" and "cpu.scalar" in impls, impls
        assert all(r["median_ms"] > 0 and r["gwork_per_s"] > 0 for r in rows if r["op"] == op)
    assert "scan    cpu.scalar" in p.stdout


@pytest.mark.parametrize("args,name", [(["--d-state", "0"], "--d-state"), (["--width", "17"], "--width"),
                                       (["--seqlen", "x"], "--seqlen"),
                                       (["--json", "/nonexistent/dir/x.json"], "--json")])
def test_bench_ssm_bad_input(args, name):
    assert_clean_failure(run("bench", "ssm", "--seqlen", "8", "--d-inner", "8", "--repeats", "1", *args), name)


def test_unknown_subcommand():
    assert_clean_failure(run("frobnicate"))
    assert_clean_failure(run("bench", "frobnicate"), "frobnicate")
    assert_clean_failure(run("bench"), "attention")  # names what is available


def test_no_subcommand():
    assert_clean_failure(run())


def test_cuda_without_cuda_fails_with_the_library_message():
    if cuda_devices() > 0:
        pytest.skip("this build has CUDA devices")
    p = run("bench", "attention", *TINY, "--device", "cuda")
    assert_clean_failure(p)
    assert "CUDA" in p.stderr


def test_bench_profile_writes_a_chrome_trace(tmp_path):
    trace = tmp_path / "trace.json"
    env = dict(os.environ, FLASHKIT_CPU_PEAK_GFLOPS="100", FLASHKIT_CPU_BW_GBS="20")  # skip the roof measurement
    proc = subprocess.run([CLI, "bench", "attention", "--seqlen", "64", "--heads", "2", "--head-dim", "32",
                           "--repeats", "2", "--profile", str(trace)], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(trace.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e["name"] for e in events if e.get("ph") == "X"}
    # warmup 1 + 2 timed calls per row; fwd rows and fwd+bwd rows for both implementations
    assert {"standard.fwd", "standard.bwd", "flash.fwd", "flash.bwd"} <= names
    flash_fwd = [e for e in events if e.get("name") == "flash.fwd"]
    assert all(e["dur"] > 0 and e["args"]["flops"] > 0 for e in flash_fwd)
    assert "flash.fwd" in proc.stderr and "trace:" in proc.stderr
