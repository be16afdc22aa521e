#!/usr/bin/env python3
"""The transformers side of the CUDA engine benchmark (tools/gpu/engine.sh runs it on the GPU machine).

  bench_hf_cuda.py make OUTDIR                 random-weight bf16 checkpoints from models/configs/*.json
                                               (save_pretrained), plus OUTDIR/<name>/bench_prompt.json
  bench_hf_cuda.py bench OUTDIR --json F       transformers decode tok/s (eager generate, and static cache +
                                               torch.compile) and 4k-token prefill tok/s, batch 1, bf16
  bench_hf_cuda.py fidelity OUTDIR --flashkit FK.json --json F
                                               flashkit's greedy tokens (FK.json, from the flashkit bench) against
                                               transformers, teacher-forced: at every generated position, does
                                               transformers' argmax (bf16, and f32 with TF32 off) pick flashkit's token

Decode tok/s = (N - 1) / (time of generate(N) - time of generate(1)), so the prefill and the first token are out.
"""
import argparse
import json
import os
import sys
import time
import traceback

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

MODELS = {"gemma-3-270m": "gemma-3-270m.json", "llama-3.2-1b": "llama-3.2-1b.json"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT, NEW, PREFILL = 128, 256, 4096


def log(*a):
    print(*a, flush=True)


def load(path, dtype=torch.bfloat16):
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, attn_implementation="sdpa")
    return m.to("cuda").eval()


def make(outdir, only=None):
    from transformers import AutoConfig, AutoModelForCausalLM
    os.makedirs(outdir, exist_ok=True)
    for i, (name, cfgfile) in enumerate(MODELS.items()):
        if only and name not in only.split(","):
            continue
        d = json.load(open(os.path.join(ROOT, "models", "configs", cfgfile)))
        d.pop("architectures", None)
        cfg = AutoConfig.for_model(**d)
        torch.manual_seed(1234 + i)
        try:
            m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        except TypeError:
            m = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
        path = os.path.join(outdir, name)
        m.save_pretrained(path)
        g = torch.Generator().manual_seed(99 + i)
        ids = torch.randint(10, cfg.vocab_size - 10, (PROMPT,), generator=g).tolist()
        json.dump(ids, open(os.path.join(path, "bench_prompt.json"), "w"))
        log("made", path, sum(p.numel() for p in m.parameters()) / 1e6, "M parameters")


def timed(fn, reps=3):
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def decode_rate(model, ids, **kw):
    def gen(n):
        return model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw)
    gen(8)  # warm-up (and compilation)
    gen(NEW)
    t1 = timed(lambda: gen(1), reps=2)
    tn = timed(lambda: gen(NEW), reps=2)
    return (NEW - 1) / max(tn - t1, 1e-9), gen(NEW)[0, ids.shape[1]:].tolist()


def bench_one(outdir, name, mode):
    """One (model, mode) measurement in this process; returns a dict."""
    path = os.path.join(outdir, name)
    r = {}
    model = load(path)
    ids = torch.tensor([json.load(open(os.path.join(path, "bench_prompt.json")))], device="cuda")
    with torch.no_grad():
        if mode == "eager":
            r["eager_decode_tok_s"], r["eager_tokens"] = decode_rate(model, ids)
            log(name, "eager decode %.1f tok/s" % r["eager_decode_tok_s"])
        elif mode == "prefill":  # one forward over 4k tokens, last-row logits only (as the engine computes them)
            long = ids.repeat(1, PREFILL // ids.shape[1] + 1)[:, :PREFILL].contiguous()
            fwd = lambda: model(long, use_cache=False, logits_to_keep=1)
            fwd()
            r["prefill_tok_s"] = PREFILL / timed(fwd)
            log(name, "prefill %d tokens %.0f tok/s" % (PREFILL, r["prefill_tok_s"]))
        else:  # "compiled": CUDA graphs through inductor; "compiled_default": without them (the fallback)
            model.generation_config.cache_implementation = "static"
            cmode = "reduce-overhead" if mode == "compiled" else "default"
            model.forward = torch.compile(model.forward, mode=cmode, fullgraph=True)
            r["compiled_decode_tok_s"], r["compiled_tokens"] = decode_rate(model, ids, cache_implementation="static")
            r["compiled_mode"] = cmode
            log(name, "static cache + torch.compile(%s) decode %.1f tok/s" % (cmode, r["compiled_decode_tok_s"]))
    return r


def run_isolated(argv, result_json, timeout):
    """Runs `bench_hf_cuda.py ARGV` in its own process. Returns (numbers, error): numbers are what the child wrote
    to result_json -- kept even when it crashed afterwards (torch.compile/inductor has segfaulted at teardown) --
    and error is None, or why it failed with the last lines of its stderr."""
    import signal
    import subprocess
    import tempfile
    with tempfile.TemporaryFile(mode="w+", errors="replace") as err:
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__)] + argv, timeout=timeout, stderr=err)
            rc, why = p.returncode, None
            if rc < 0:
                try:
                    why = "killed by signal %d (%s)" % (-rc, signal.Signals(-rc).name)
                except ValueError:
                    why = "killed by signal %d" % -rc
            elif rc != 0:
                why = "exit status %d" % rc
        except subprocess.TimeoutExpired:
            why = "timeout after %d s" % timeout
        err.seek(0)
        text = err.read()
    sys.stderr.write(text)  # into the log, as if it had not been captured
    sys.stderr.flush()
    numbers = {}
    try:
        with open(result_json) as f:
            numbers = json.load(f)
    except (OSError, ValueError):
        pass
    if why is None and not numbers:
        why = "no result written"
    if why is not None:
        tail = [line[:300] for line in text.strip().splitlines()[-6:]]
        why = {"error": why, "stderr_tail": tail}
    return numbers, why


def bench(outdir, out_json):
    """Each (model, mode) in its own process, so a crash (torch.compile has segfaulted here) loses only that one;
    a failure is recorded in the JSON as <mode>_error (why, and the last lines of the child's stderr)."""
    import tempfile
    import transformers
    res = {"transformers": transformers.__version__, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "models": {}}
    for name in MODELS:
        r = res["models"][name] = {}
        for mode in ("prefill", "eager", "compiled", "compiled_default"):
            if mode == "compiled_default" and "compiled_decode_tok_s" in r:
                continue
            with tempfile.TemporaryDirectory() as td:
                tf = os.path.join(td, "result.json")
                try:
                    numbers, err = run_isolated(["bench1", outdir, "--model", name, "--mode", mode, "--json", tf],
                                                tf, timeout=240)
                except Exception as e:  # noqa: BLE001 - never lose the other numbers
                    numbers, err = {}, {"error": "%s: %s" % (type(e).__name__, e)}
                r.update(numbers)
                if err is not None:
                    r[mode + "_error"] = err
                    log(name, mode, "failed:", err["error"], "(salvaged: %s)" % sorted(numbers) if numbers else "")
            json.dump(res, open(out_json, "w"), indent=1)


def fidelity(outdir, fk_json, out_json):
    fk = {os.path.basename(os.path.normpath(e["model"])): e for e in json.load(open(fk_json))}
    res = {}
    for name in MODELS:
        if name not in fk:
            continue
        path = os.path.join(outdir, name)
        prompt = json.load(open(os.path.join(path, "bench_prompt.json")))
        r = res[name] = {}
        for key in ("graphs_on", "graphs_off"):
            toks = fk[name].get(key, {}).get("tokens")
            if not toks:
                continue
            seq = torch.tensor([prompt + toks], device="cuda")
            for dt, label in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
                model = load(path, dt)
                with torch.no_grad():
                    logits = model(seq, use_cache=False).logits[0].float()
                # position P-1+i predicts generated token i
                pred = logits[len(prompt) - 1: len(prompt) - 1 + len(toks)].argmax(-1).tolist()
                agree = sum(int(a == b) for a, b in zip(pred, toks))
                first = next((i for i, (a, b) in enumerate(zip(pred, toks)) if a != b), None)
                r["%s_vs_hf_%s" % (key, label)] = {"top1_agreement": agree / len(toks), "steps": len(toks),
                                                   "first_mismatch": first}
                log(name, key, "vs transformers %s: top-1 agreement %.4f (%d/%d), first mismatch %s" % (
                    label, agree / len(toks), agree, len(toks), first))
                del model
                torch.cuda.empty_cache()
    json.dump(res, open(out_json, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["make", "bench", "bench1", "fidelity"])
    ap.add_argument("--model", default=None)
    ap.add_argument("--mode", dest="bmode", default="eager")
    ap.add_argument("outdir")
    ap.add_argument("--json", default="hf.json")
    ap.add_argument("--flashkit", default=None)
    a = ap.parse_args()
    if a.mode == "make":
        make(a.outdir, os.environ.get("FK_BENCH_ONLY"))
    elif a.mode == "bench":
        bench(a.outdir, a.json)
    elif a.mode == "bench1":
        r = bench_one(a.outdir, a.model, a.bmode)
        with open(a.json, "w") as f:
            json.dump(r, f)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # the numbers are written: skip interpreter teardown (where compiled graphs have crashed)
    else:
        fidelity(a.outdir, a.flashkit, a.json)


if __name__ == "__main__":
    sys.exit(main())
