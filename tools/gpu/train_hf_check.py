#!/usr/bin/env python3
"""flashkit's trainer and its exported models against PyTorch autograd and transformers (tools/gpu/train.sh
stage `hfcheck` runs it on the GPU machine; tests/train/test_train_hf_check.py runs the parts that need no
transformers on the CPU in CI).

  grad       one training step (`flashkit train --steps 1 --dump-step1 DIR`, on --devices) of two tiny recipes --
             Llama (GQA, untied) and Gemma 3 (sliding window, (1 + w) norms, q/k norms, final soft-cap, tied
             embeddings) -- trained on docs/*.md with models/tokenizer. The dumped initial weights (DIR/model, an
             f32 Hugging Face directory) go into transformers (AutoModelForCausalLM, attn_implementation="eager",
             f32, on the CPU); the dumped batch through it, the mean cross-entropy over the targets (-1 ignored),
             backward(). Compared with flashkit's loss, gradient norm and every tensor's gradient (the dump's names
             are the export's: q/k/v and gate/up are separate tensors there although the trainer multiplies them
             fused; a tied embedding's gradient holds the lm_head's part in both; Gemma's norm weights are the
             checkpoint's own values, (1 + w) applied in the forward, in both). Criteria: a CPU dump (f32) within
             F32_TOL, a CUDA dump (bf16 activations, f32 master weights) within BF16_TOL. The same comparison runs
             against `torch_reference` (a plain PyTorch decoder written here, f64), which needs no transformers.
  logits     models/target and models/draft in transformers (f32, CPU) vs flashkit (flashkit.Model, dtype="f32",
             CPU): every position's logits (a session's prefill) and Model.logits (the last row) for a few prompts;
             ||d|| / ||ref|| <= 1e-3 per row.
  tokenizer  models/tokenizer in transformers (AutoTokenizer) vs flashkit.Tokenizer on a few hundred strings
             (docs paragraphs and lines, unicode, whitespace runs, special-token text): ids with and without
             special tokens identical, decode identical (clean_up_tokenization_spaces as the config says: false),
             the chat template rendered by apply_chat_template(tokenize=False) equal to
             tests/data/chat/shipped_tokenizer.json, which flashkit's renderer matches (tests/chat).

  train_hf_check.py [--flashkit build-gpu/bin/flashkit] [--out train-hf-check.json] [--devices cpu,cuda]
                    [--parts grad,logits,tokenizer] [--work DIR]
Needs PYTHONPATH=python and FLASHKIT_LIBRARY=<libflashkit.so> for the logits and tokenizer parts. Exit status 0
when every check that ran passed, 1 otherwise; parts that cannot run (no transformers, no CUDA) are reported as
skipped with the reason, and count as failures only with --strict.
"""
import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER = os.path.join(ROOT, "models", "tokenizer")
CHAT_CASES = os.path.join(ROOT, "tests", "data", "chat", "shipped_tokenizer.json")
# (loss rel, gradient-norm rel per tensor, ||g - g_ref|| / ||g_ref|| per tensor)
F32_TOL = {"loss": 1e-4, "norm": 1e-4, "grad": 1e-4}
BF16_TOL = {"loss": 1e-2, "norm": 3e-2, "grad": 1e-1}
LOGITS_TOL = 1e-3
TRAIN_TIMEOUT = 300

# The tiny recipes' model blocks (vocabulary: the shipped tokenizer's 8192 ids).
TINY_MODELS = {
    "llama": {"model_type": "llama", "vocab_size": 8192, "hidden_size": 48, "intermediate_size": 80,
              "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 8,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 64,
              "hidden_act": "silu", "tie_word_embeddings": False},
    "gemma": {"model_type": "gemma3_text", "vocab_size": 8192, "hidden_size": 48, "intermediate_size": 80,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": None,
              "sliding_window": 8, "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
              "query_pre_attn_scalar": 16, "final_logit_softcapping": 5.0, "attn_logit_softcapping": None,
              "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 64, "tie_word_embeddings": True},
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rel(a, b):
    """||a - b|| / ||b|| (0 when both are 0)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    d = float(np.linalg.norm((a - b).ravel()))
    n = float(np.linalg.norm(b.ravel()))
    return d / n if n > 0 else (0.0 if d == 0 else math.inf)


# ---------------------------------------------------------------------------------------------------------------
# files

def read_safetensors(path):
    """name -> float32 numpy array (F32, BF16, F16), without the safetensors package."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            f.seek(base + b)
            raw = f.read(e - b)
            if t["dtype"] == "F32":
                a = np.frombuffer(raw, dtype="<f4").copy()
            elif t["dtype"] == "BF16":
                a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            elif t["dtype"] == "F16":
                a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
            else:
                raise ValueError("%s: tensor %s has dtype %s (expected F32, BF16 or F16)" % (path, name, t["dtype"]))
            out[name] = a.reshape(t["shape"])
    return out


def load_dump(d):
    """A --dump-step1 directory: (step.json, {name: grad}, model dir)."""
    for f in ("step.json", "grads.safetensors", os.path.join("model", "config.json"),
              os.path.join("model", "model.safetensors")):
        if not os.path.exists(os.path.join(d, f)):
            raise RuntimeError("%s: the dump has no %s (flashkit train --dump-step1 did not finish)" % (d, f))
    with open(os.path.join(d, "step.json")) as f:
        meta = json.load(f)
    return meta, read_safetensors(os.path.join(d, "grads.safetensors")), os.path.join(d, "model")


# ---------------------------------------------------------------------------------------------------------------
# flashkit runs

def run_fk(fk, args, timeout):
    p = subprocess.run([fk, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    if p.returncode != 0:
        raise RuntimeError("flashkit %s: exit status %d: %s" % (args[0], p.returncode, p.stderr.strip()[-2000:]))
    return p


def prepare_tokens(fk, work):
    """docs/*.md through the shipped tokenizer -> work/tokens/{train,val}.bin (once)."""
    d = os.path.join(work, "tokens")
    if not os.path.exists(os.path.join(d, "val.bin")):
        docs = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
        if not docs:
            raise RuntimeError("no docs/*.md under %s" % ROOT)
        run_fk(fk, ["prepare-data", "--tokenizer", TOKENIZER, "-o", d, "--val-fraction", 0.05, *docs], 120)
    return d


def write_recipe(work, arch, device, batch=3, seq_len=32):
    tokens = os.path.join(work, "tokens")
    r = {"model": TINY_MODELS[arch],
         "data": {"train": os.path.join(tokens, "train.bin"), "tokenizer": TOKENIZER},
         "train": {"steps": 1, "batch_size": batch, "seq_len": seq_len, "lr": 1e-3, "warmup_steps": 0, "seed": 7},
         "log": {"interval": 1},
         "output": {"dir": os.path.join(work, "run-%s-%s" % (arch, device)), "dtype": "f32"},
         "device": device, "threads": 2}
    path = os.path.join(work, "recipe-%s-%s.json" % (arch, device))
    with open(path, "w") as f:
        json.dump(r, f, indent=1)
    return path, r["output"]["dir"]


def dump_step(fk, work, arch, device):
    """flashkit train --steps 1 --dump-step1 on one device -> the dump directory."""
    recipe, run_dir = write_recipe(work, arch, device)
    dump = os.path.join(work, "dump-%s-%s" % (arch, device))
    for d in (run_dir, dump):
        shutil.rmtree(d, ignore_errors=True)
    run_fk(fk, ["train", "--config", recipe, "--device", device, "--dump-step1", dump, "-q"], TRAIN_TIMEOUT)
    return dump


# ---------------------------------------------------------------------------------------------------------------
# the references: a plain PyTorch decoder (no transformers) and transformers

def torch_reference(cfg, weights, dtype=None):
    """A plain PyTorch decoder (Llama / Gemma 3, as transformers computes them) over `weights` (name -> numpy).
    Returns (forward(ids [B, T] long tensor) -> logits [B, T, V], {name: leaf tensor requiring grad})."""
    import torch
    dtype = dtype or torch.float64
    gemma = cfg["model_type"].startswith("gemma")
    if cfg.get("rope_scaling"):
        raise ValueError("torch_reference: rope_scaling is not supported (config has %r)" % cfg["rope_scaling"])
    P = {n: torch.tensor(np.asarray(w), dtype=dtype, requires_grad=True) for n, w in weights.items()}
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or H // nh
    eps = cfg.get("rms_norm_eps", 1e-6)
    tied = cfg.get("tie_word_embeddings", gemma)
    if gemma:
        types = cfg.get("layer_types") or ["full_attention" if (i + 1) % cfg.get("sliding_window_pattern", 6) == 0
                                           else "sliding_attention" for i in range(L)]
    else:
        types = ["full_attention"] * L
    scale = (cfg.get("query_pre_attn_scalar") or hd) ** -0.5 if gemma else hd ** -0.5
    act = cfg.get("hidden_activation" if gemma else "hidden_act") or ("gelu_pytorch_tanh" if gemma else "silu")

    def norm(x, w):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return y * (1 + w) if gemma else y * w

    def rope(x, base):  # x [B, T, h, hd]; rotate-half convention
        T = x.shape[1]
        inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1).to(dtype)[None, :, None, :]
        sin = torch.cat([ang.sin(), ang.sin()], -1).to(dtype)[None, :, None, :]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def gate(g):
        if act in ("silu", "swish"):
            return torch.nn.functional.silu(g)
        if act in ("gelu_pytorch_tanh", "gelu_tanh"):
            return torch.nn.functional.gelu(g, approximate="tanh")
        raise ValueError("torch_reference: activation %r" % act)

    def forward(ids):
        B, T = ids.shape
        h = P["model.embed_tokens.weight"][ids]
        if gemma:
            h = h * torch.tensor(H ** 0.5, dtype=dtype)
        qpos = torch.arange(T)[:, None]
        kpos = torch.arange(T)[None, :]
        for i in range(L):
            pre = "model.layers.%d." % i
            sliding = types[i] == "sliding_attention"
            x = norm(h, P[pre + "input_layernorm.weight"])
            q = (x @ P[pre + "self_attn.q_proj.weight"].T).view(B, T, nh, hd)
            k = (x @ P[pre + "self_attn.k_proj.weight"].T).view(B, T, nkv, hd)
            v = (x @ P[pre + "self_attn.v_proj.weight"].T).view(B, T, nkv, hd)
            if gemma:
                q, k = norm(q, P[pre + "self_attn.q_norm.weight"]), norm(k, P[pre + "self_attn.k_norm.weight"])
            base = cfg.get("rope_local_base_freq", 10000.0) if (gemma and sliding) else cfg.get("rope_theta", 10000.0)
            q, k = rope(q, base), rope(k, base)
            rep = nh // nkv
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
            s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
            cap = cfg.get("attn_logit_softcapping")
            if cap:
                s = torch.tanh(s / cap) * cap
            allowed = kpos <= qpos
            if sliding:
                allowed = allowed & (qpos - kpos < cfg["sliding_window"])
            s = s.masked_fill(~allowed, float("-inf"))
            a = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v).reshape(B, T, nh * hd)
            o = a @ P[pre + "self_attn.o_proj.weight"].T
            if gemma:
                o = norm(o, P[pre + "post_attention_layernorm.weight"])
                x = norm(h + o, P[pre + "pre_feedforward_layernorm.weight"])
            else:
                x = norm(h + o, P[pre + "post_attention_layernorm.weight"])
            h = h + o
            m = gate(x @ P[pre + "mlp.gate_proj.weight"].T) * (x @ P[pre + "mlp.up_proj.weight"].T)
            m = m @ P[pre + "mlp.down_proj.weight"].T
            if gemma:
                m = norm(m, P[pre + "post_feedforward_layernorm.weight"])
            h = h + m
        h = norm(h, P["model.norm.weight"])
        w = P["model.embed_tokens.weight"] if tied else P["lm_head.weight"]
        logits = h @ w.T
        cap = cfg.get("final_logit_softcapping")
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    return forward, P


def loss_and_grads_torch(model_dir, meta, dtype=None):
    import torch
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    forward, P = torch_reference(cfg, read_safetensors(os.path.join(model_dir, "model.safetensors")), dtype)
    ids, tg = torch.tensor(meta["ids"], dtype=torch.long), torch.tensor(meta["targets"], dtype=torch.long)
    logits = forward(ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tg.reshape(-1), ignore_index=-1)
    loss.backward()
    # a tensor the forward never reached has no .grad; its gradient is zero
    return float(loss), {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().double().numpy()
                         for n, p in P.items()}


def hf_load(path, dtype, device="cpu"):
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, attn_implementation="eager")
    return m.to(device).eval()


def loss_and_grads_hf(model_dir, meta):
    import torch
    m = hf_load(model_dir, torch.float32)
    ids, tg = torch.tensor(meta["ids"], dtype=torch.long), torch.tensor(meta["targets"], dtype=torch.long)
    logits = m(input_ids=ids).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tg.reshape(-1), ignore_index=-1)
    loss.backward()
    grads = {n: p.grad.detach().double().numpy() for n, p in m.named_parameters() if p.grad is not None}
    return float(loss), grads


def compare_step(meta, fk_grads, ref_loss, ref_grads, tol):
    """flashkit's dump vs one reference: loss, global norm, per-tensor norms and errors."""
    names_fk, names_ref = set(fk_grads), set(ref_grads)
    res = {"loss_flashkit": meta["loss"], "loss_ref": ref_loss,
           "loss_rel": abs(meta["loss"] - ref_loss) / abs(ref_loss),
           "missing_in_ref": sorted(names_fk - names_ref), "missing_in_flashkit": sorted(names_ref - names_fk),
           "tensors": {}}
    ref_total = math.sqrt(sum(float(np.sum(np.square(g))) for g in ref_grads.values()))
    res["grad_norm_flashkit"], res["grad_norm_ref"] = meta["grad_norm"], ref_total
    res["grad_norm_rel"] = abs(meta["grad_norm"] - ref_total) / ref_total if ref_total > 0 else math.inf
    worst_norm = worst_err = 0.0
    for n in sorted(names_fk & names_ref):
        g, r = fk_grads[n], ref_grads[n]
        if tuple(g.shape) != tuple(r.shape):
            res["tensors"][n] = {"error": "shape %s vs reference %s" % (list(g.shape), list(r.shape))}
            worst_norm = worst_err = math.inf
            continue
        nf, nr = float(np.linalg.norm(g.ravel())), float(np.linalg.norm(r.ravel()))
        norm_rel = abs(nf - nr) / nr if nr > 0 else (0.0 if nf == 0 else math.inf)
        err = rel(g, r)
        res["tensors"][n] = {"norm": nf, "norm_ref": nr, "norm_rel": norm_rel, "rel_err": err}
        worst_norm, worst_err = max(worst_norm, norm_rel), max(worst_err, err)
    res["max_norm_rel"], res["max_grad_rel_err"], res["tol"] = worst_norm, worst_err, tol
    res["pass"] = bool(not res["missing_in_ref"] and not res["missing_in_flashkit"] and res["loss_rel"] <= tol["loss"]
                       and res["grad_norm_rel"] <= tol["norm"] and worst_norm <= tol["norm"]
                       and worst_err <= tol["grad"])
    return res


def check_grad(fk, work, devices, have_hf):
    out = {}
    prepare_tokens(fk, work)
    for arch in TINY_MODELS:
        for dev in devices:
            key = "%s-%s" % (arch, dev)
            tol = F32_TOL if dev == "cpu" else BF16_TOL
            r = out[key] = {}
            try:
                t0 = time.time()
                meta, grads, model_dir = load_dump(dump_step(fk, work, arch, dev))
                grads = {n: g.astype(np.float64) for n, g in grads.items()}
                r["flashkit_s"] = round(time.time() - t0, 2)
                r["backend"] = meta.get("backend")
                r["torch_f64"] = compare_step(meta, grads, *loss_and_grads_torch(model_dir, meta), tol)
                if have_hf:
                    r["transformers_f32"] = compare_step(meta, grads, *loss_and_grads_hf(model_dir, meta), tol)
                else:
                    r["transformers_f32"] = {"skipped": have_hf is False and "transformers is not installed"}
            except Exception as e:  # one failure must not hide the other checks
                r["error"] = "%s: %s" % (type(e).__name__, e)
                r["traceback"] = traceback.format_exc()
            ran = [r[k] for k in ("torch_f64", "transformers_f32") if k in r and "pass" in r[k]]
            r["pass"] = bool(ran) and "error" not in r and all(x["pass"] for x in ran)
            log("grad %-12s %s" % (key, "PASS" if r["pass"] else "FAIL " + r.get("error", "")))
    return out


# ---------------------------------------------------------------------------------------------------------------
# logits of the shipped models

PROMPTS = ["In the beginning God created the heaven and the earth.",
           "The Debian package manager installs",
           "dog: a domesticated carnivore; \"the dog barked all night\"",
           "<|im_start|>user\nWhat is a package?<|im_end|>\n<|im_start|>assistant\n"]


_FK_LOGITS = r"""
import json, sys
import numpy as np
import flashkit
model_dir, prompts, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
tok = flashkit.Tokenizer(model_dir)
arrays = {}
with flashkit.Model(model_dir, device="cpu", dtype="f32") as m:
    for i, p in enumerate(prompts):
        ids = tok.encode(p, add_special=True)
        with m.session() as s:
            arrays["rows%d" % i] = np.asarray(s.prefill(ids, all_logits=True), dtype=np.float64)
        arrays["last%d" % i] = np.asarray(m.logits(ids), dtype=np.float64).ravel()
        arrays["ids%d" % i] = np.asarray(ids, dtype=np.int64)
np.savez(out, **arrays)
"""


def flashkit_logits(model_dir, prompts):
    """{prompt index: (ids, all-position logits [n, V], Model.logits last row [V])} on flashkit's CPU, f32.

    In a fresh interpreter: libflashkit's OpenMP and BLAS in a process that already loaded torch's crash on the GPU
    machine's image (a Model load segfaulted there; the same call alone works)."""
    with tempfile.TemporaryDirectory() as td:
        out = os.path.join(td, "logits.npz")
        p = subprocess.run([sys.executable, "-c", _FK_LOGITS, model_dir, json.dumps(prompts), out],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError("flashkit logits (subprocess): exit status %d: %s" % (p.returncode, p.stderr[-2000:]))
        z = np.load(out)
        return {i: ([int(x) for x in z["ids%d" % i]], z["rows%d" % i], z["last%d" % i]) for i in range(len(prompts))}


def check_logits(models, have_hf):
    import torch
    res = {}
    for name in models:
        d = os.path.join(ROOT, "models", name)
        r = res[name] = {"prompts": []}
        try:
            fk = flashkit_logits(d, PROMPTS)
            refs = {}
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            forward, _ = torch_reference(cfg, read_safetensors(os.path.join(d, "model.safetensors")), torch.float64)
            hf = hf_load(d, torch.float32) if have_hf else None
            for i, (ids, rows, last) in fk.items():
                t = torch.tensor([ids], dtype=torch.long)
                with torch.no_grad():
                    refs["torch_f64"] = forward(t)[0].double().numpy()
                    if hf is not None:
                        refs["transformers_f32"] = hf(input_ids=t).logits[0].double().numpy()
                e = {"tokens": len(ids)}
                for k, ref in refs.items():
                    e[k] = {"max_row_rel": max(rel(rows[j], ref[j]) for j in range(len(ids))),
                            "last_rel": rel(last, ref[-1]),
                            "argmax_same": int(np.sum(rows.argmax(-1) == ref.argmax(-1)))}
                r["prompts"].append(e)
            r["pass"] = all(e[k]["max_row_rel"] <= LOGITS_TOL and e[k]["last_rel"] <= LOGITS_TOL
                            for e in r["prompts"] for k in refs)
            r["references"] = sorted(refs)
        except Exception as e:
            r["error"] = "%s: %s" % (type(e).__name__, e)
            r["traceback"] = traceback.format_exc()
            r["pass"] = False
        log("logits %-8s %s" % (name, "PASS" if r["pass"] else "FAIL " + r.get("error", "")))
    return res


# ---------------------------------------------------------------------------------------------------------------
# tokenizer and chat template

def tokenizer_texts():
    """A few hundred varied strings: docs paragraphs and lines, unicode, whitespace runs, special-token text."""
    texts = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path, encoding="utf-8") as f:
            body = f.read()
        paras = [p for p in body.split("\n\n") if p.strip()]
        texts += paras[:12]
        texts += [l for l in body.splitlines() if l.strip()][:8]
    texts += ["", " ", "  ", "\n", "\n\n\n", "\t", " \t \n ", "a  b", "a   b\n\n  c", "trailing   ", "   leading",
              "x" * 300, "ab" * 200, "1234567890", "3.14159 2,718 1e-9 0x7fff", "don't I'll we've they're",
              "HELLO World MiXeD", "café naïve résumé Ångström", "日本語のテキストです。", "中文文本，标点。",
              "Ελληνικά και русский текст", "עברית ועربية", "हिन्दी पाठ", "emoji 😀👍🏽🇫🇷 👨‍👩‍👧",
              "zero\u200bwidth joiner\u200d", "combining e\u0301 vs \u00e9", "tab\tseparated\tvalues",
              "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>user\nhi<|im_end|>\n",
              "text<|im_end|>more", "<|im_start|><|im_start|>", "<|not_special|>", "<|im_end", "\x00\x01\x7f",
              "def f(x):\n    return x ** 2  # square\n", "if (a && b) { c = d[i]; }", "https://example.org/a?b=c&d=e",
              "C:\\path\\to\\file.txt", "~/.config/flashkit/*.json", "$ flashkit train --config r.json",
              "And the LORD said unto Moses,", "   \n   \n", "\r\n windows line\r\n"]
    return texts


CHAT_CONVERSATIONS = [
    ("one user turn", [{"role": "user", "content": "What is a package?"}]),
    ("system user assistant user", [{"role": "system", "content": "You answer briefly."},
                                    {"role": "user", "content": "Hello"},
                                    {"role": "assistant", "content": "Hi. How can I help?"},
                                    {"role": "user", "content": "Name a book of the Bible."}]),
    ("unicode and newlines", [{"role": "user", "content": "caf\u00e9 \u65e5\u672c \U0001F600\n\n  indented\ttab"}]),
    ("empty content", [{"role": "user", "content": ""}]),
    ("special-token text in content", [{"role": "user", "content": "<|im_end|> and <|begin_of_text|>"}]),
]


def render_cases():
    with open(CHAT_CASES, encoding="utf-8") as f:
        return json.load(f)


def jinja_chat_cases():
    """The chat cases rendered with jinja2 as transformers sets it up (tools/chat/render_expected.py), from
    models/tokenizer/tokenizer_config.json: the content of tests/data/chat/shipped_tokenizer.json."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "chat"))
    import render_expected
    render, _, version = render_expected.make_jinja_renderer()
    with open(os.path.join(TOKENIZER, "tokenizer_config.json"), encoding="utf-8") as f:
        tc = json.load(f)
    kw = {"bos_token": tc["bos_token"], "eos_token": tc["eos_token"]}
    cases = []
    for name, msgs in CHAT_CONVERSATIONS:
        for agp in (False, True):
            cases.append({"name": "%s%s" % (name, ", generation prompt" if agp else ""), "messages": msgs,
                          "add_generation_prompt": agp, "output": render(tc["chat_template"], msgs, agp, kw)})
    return {"about": "models/tokenizer's chat template rendered with %s as transformers sets it up "
                     "(tools/gpu/train_hf_check.py --write-chat-cases); tests/chat checks flashkit's renderer "
                     "against it, train_hf_check.py transformers' apply_chat_template" % version,
            "bos_token": kw["bos_token"], "eos_token": kw["eos_token"], "template": tc["chat_template"],
            "cases": cases}


def check_tokenizer(have_hf):
    import flashkit
    res = {"texts": 0, "ids_mismatch": [], "ids_special_mismatch": [], "decode_mismatch": [],
           "roundtrip_mismatch": [], "chat_mismatch": []}
    fk = flashkit.Tokenizer(TOKENIZER)
    texts = tokenizer_texts()
    res["texts"] = len(texts)
    hf = None
    if have_hf:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(TOKENIZER)
        res["hf_class"] = type(hf).__name__
    for i, t in enumerate(texts):
        ids = fk.encode(t, add_special_tokens=False)
        if fk.decode(ids) != t:
            res["roundtrip_mismatch"].append({"index": i, "text": t[:200]})
        if hf is None:
            continue
        hids = hf(t, add_special_tokens=False)["input_ids"]
        if hids != ids:
            res["ids_mismatch"].append({"index": i, "text": t[:200], "flashkit": ids[:64], "transformers": hids[:64]})
        hs, fs = hf(t)["input_ids"], fk.encode(t, add_special=True)
        if hs != fs:
            res["ids_special_mismatch"].append({"index": i, "text": t[:200], "flashkit": fs[:64], "transformers": hs[:64]})
        for skip in (False, True):
            a, b = fk.decode(ids, skip_special=skip), hf.decode(ids, skip_special_tokens=skip)
            if a != b:
                res["decode_mismatch"].append({"index": i, "skip_special": skip, "flashkit": a[:200],
                                               "transformers": b[:200]})
    if hf is not None:
        for c in render_cases()["cases"]:
            got = hf.apply_chat_template(c["messages"], tokenize=False,
                                         add_generation_prompt=c["add_generation_prompt"])
            if got != c["output"]:
                res["chat_mismatch"].append({"name": c["name"], "expected": c["output"], "transformers": got})
            res["chat_cases"] = res.get("chat_cases", 0) + 1
    res["pass"] = not any(res[k] for k in res if k.endswith("_mismatch"))
    res["compared_with"] = "transformers" if hf is not None else "flashkit round trip only (no transformers)"
    log("tokenizer %s (%d texts, %s)" % ("PASS" if res["pass"] else "FAIL", len(texts), res["compared_with"]))
    return res


# ---------------------------------------------------------------------------------------------------------------

def have_transformers():
    try:
        import transformers  # noqa: F401
        return True
    except Exception:
        return False


def have_cuda():
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def summary_lines(res):
    lines = ["train_hf_check: transformers %s, torch %s" % (res["env"].get("transformers"), res["env"].get("torch"))]
    for key, r in res.get("grad", {}).items():
        for ref in ("torch_f64", "transformers_f32"):
            c = r.get(ref, {})
            if "pass" in c:
                lines.append("  grad %-11s vs %-16s loss %.6f/%.6f rel %.1e | gnorm rel %.1e | max tensor norm rel "
                             "%.1e | max grad rel err %.1e  %s" % (
                                 key, ref, c["loss_flashkit"], c["loss_ref"], c["loss_rel"], c["grad_norm_rel"],
                                 c["max_norm_rel"], c["max_grad_rel_err"], "PASS" if c["pass"] else "FAIL"))
            elif c.get("skipped"):
                lines.append("  grad %-11s vs %-16s skipped: %s" % (key, ref, c["skipped"]))
        if "error" in r:
            lines.append("  grad %-11s ERROR %s" % (key, r["error"]))
    for name, r in res.get("logits", {}).items():
        if "error" in r:
            lines.append("  logits %-7s ERROR %s" % (name, r["error"]))
            continue
        for k in r.get("references", []):
            worst = max(max(e[k]["max_row_rel"], e[k]["last_rel"]) for e in r["prompts"])
            lines.append("  logits %-7s vs %-16s max row rel %.1e over %d prompts  %s" % (
                name, k, worst, len(r["prompts"]), "PASS" if worst <= LOGITS_TOL else "FAIL"))
    t = res.get("tokenizer")
    if t:
        if "error" in t:
            lines.append("  tokenizer ERROR %s" % t["error"])
        else:
            lines.append("  tokenizer %d texts vs %s: ids %d/%d mismatches, decode %d, round trip %d, chat %d of %s  %s"
                         % (t["texts"], t["compared_with"], len(t["ids_mismatch"]), len(t["ids_special_mismatch"]),
                            len(t["decode_mismatch"]), len(t["roundtrip_mismatch"]), len(t["chat_mismatch"]),
                            t.get("chat_cases", "-"), "PASS" if t["pass"] else "FAIL"))
    for s in res.get("skipped", []):
        lines.append("  skipped: " + s)
    lines.append("overall: " + ("PASS" if res["pass"] else "FAIL"))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flashkit", default=os.environ.get("FK", os.path.join(ROOT, "build-gpu", "bin", "flashkit")))
    ap.add_argument("--out", default="train-hf-check.json")
    ap.add_argument("--devices", default=None, help="default: cpu, plus cuda when torch sees a GPU")
    ap.add_argument("--parts", default="grad,logits,tokenizer")
    ap.add_argument("--models", default="target,draft", help="shipped models for the logits part")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one, removed)")
    ap.add_argument("--no-transformers", action="store_true", help="only the pure-torch references (CI)")
    ap.add_argument("--strict", action="store_true", help="a skipped part (no transformers / CUDA) fails the run")
    ap.add_argument("--write-chat-cases", action="store_true", help="(re)write %s with jinja2 and exit" %
                    os.path.relpath(CHAT_CASES, ROOT))
    a = ap.parse_args(argv)
    if a.write_chat_cases:
        with open(CHAT_CASES, "w", encoding="utf-8") as f:
            json.dump(jinja_chat_cases(), f, indent=1, ensure_ascii=False)
            f.write("\n")
        print("wrote", CHAT_CASES)
        return 0
    parts = [p for p in a.parts.split(",") if p]
    for p in parts:
        if p not in ("grad", "logits", "tokenizer"):
            ap.error("--parts: unknown part %r (expected grad, logits, tokenizer)" % p)
    if "grad" in parts and not (os.path.isfile(a.flashkit) and os.access(a.flashkit, os.X_OK)):
        ap.error("--flashkit: %s is not an executable (build the CLI first)" % a.flashkit)
    have_hf = (not a.no_transformers) and have_transformers()
    devices = a.devices.split(",") if a.devices else (["cpu", "cuda"] if have_cuda() else ["cpu"])
    res = {"env": {"python": sys.version.split()[0], "numpy": np.__version__}, "skipped": []}
    try:
        import torch
        res["env"]["torch"] = torch.__version__
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except Exception as e:
        ap.error("torch is needed (%s)" % e)
    if have_hf:
        import transformers
        res["env"]["transformers"] = transformers.__version__
    else:
        res["skipped"].append("transformers comparisons (%s)" % ("--no-transformers" if a.no_transformers
                                                                 else "transformers is not installed"))
    if "grad" in parts and "cuda" not in devices:
        res["skipped"].append("the CUDA training step (no GPU visible to torch; --devices cpu,cuda forces it)")
    work = a.work or tempfile.mkdtemp(prefix="fk-train-hf-")
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    try:
        if "grad" in parts:
            res["grad"] = check_grad(a.flashkit, work, devices, have_hf)
        if "logits" in parts:
            res["logits"] = check_logits([m for m in a.models.split(",") if m], have_hf)
        if "tokenizer" in parts:
            try:
                res["tokenizer"] = check_tokenizer(have_hf)
            except Exception as e:
                res["tokenizer"] = {"error": "%s: %s" % (type(e).__name__, e), "traceback": traceback.format_exc(),
                                    "pass": False}
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    res["seconds"] = round(time.time() - t0, 1)
    checks = list(res.get("grad", {}).values()) + list(res.get("logits", {}).values())
    if "tokenizer" in res:
        checks.append(res["tokenizer"])
    res["pass"] = bool(checks) and all(c.get("pass") for c in checks) and not (a.strict and res["skipped"])
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("\n".join(summary_lines(res)))
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
