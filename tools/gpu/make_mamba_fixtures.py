#!/usr/bin/env python3
"""Mamba fidelity on the GPU machine (transformers 5.x there): makes a tiny random MambaForCausalLM with
transformers, saves it (config.json + model.safetensors), computes transformers' logits (CPU, float64 and float32),
then compares against them
  * flashkit's engine (python package over the C API) on the CPU, f32: rel <= 1e-3 (issue 18), and on CUDA, whose
    backend keeps weights in bf16 whatever the checkpoint: rel <= 3e-2 and the same argmax on >= 90% of the rows;
  * the independent numpy forward of tests/engine/mamba_numpy.py (validates the oracle the CPU CI test uses);
(decode ms/token against the context length: bench/ssm/ssm_bench.cpp on the model this script writes).
  make_mamba_fixtures.py OUTDIR           writes OUTDIR/tiny/ and OUTDIR/mamba_check.json; exit 1 on a failed check
"""
import json
import os
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))

PROMPT = [3, 17, 42, 5, 88, 1, 0, 64, 23, 23, 9, 70, 31, 2, 95, 50]


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def make(out):
    import torch
    from transformers import MambaConfig, MambaForCausalLM
    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=96, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4,
                      use_conv_bias=True, use_bias=False, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
    model = MambaForCausalLM(cfg).float().eval()
    with torch.no_grad():  # move the parameters away from their initial values (D = 1, biases 0, ...)
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * 0.05)
    d = os.path.join(out, "tiny")
    model.save_pretrained(d)  # safetensors (the default in transformers 4.x and 5.x)
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        l32 = model(ids).logits[0].double().numpy()
        l64 = model.double()(ids).logits[0].numpy()
    np.save(os.path.join(out, "tiny_logits_f64.npy"), l64)
    return d, l32, l64


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "mamba-fixtures"
    os.makedirs(out, exist_ok=True)
    res = {"prompt_len": len(PROMPT)}
    ok = True
    d, l32, l64 = make(out)
    res["transformers_f32_vs_f64"] = rel(l32, l64)
    import mamba_numpy
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    ref_cfg = dict(cfg, expand=cfg.get("expand", 2), time_step_rank=cfg.get("time_step_rank", "auto"))
    w = mamba_numpy.load_safetensors(os.path.join(d, "model.safetensors"))
    res["numpy_reference_vs_transformers"] = rel(mamba_numpy.forward(ref_cfg, w, PROMPT), l64)
    ok &= res["numpy_reference_vs_transformers"] <= 1e-6
    import flashkit
    got = flashkit.Model(d, device="cpu", dtype="f32").session().prefill(PROMPT, all_logits=True)
    res["flashkit_cpu_vs_transformers"] = rel(got, l64)
    ok &= res["flashkit_cpu_vs_transformers"] <= 1e-3
    try:
        gc = flashkit.Model(d, device="cuda", dtype="f32").session().prefill(PROMPT, all_logits=True)
        res["flashkit_cuda_vs_transformers"] = rel(gc, l64)
        res["flashkit_cuda_argmax_agreement"] = float(np.mean(np.argmax(gc, 1) == np.argmax(l64, 1)))
        ok &= res["flashkit_cuda_vs_transformers"] <= 3e-2 and res["flashkit_cuda_argmax_agreement"] >= 0.9
    except flashkit.UnsupportedError as e:
        res["flashkit_cuda_vs_transformers"] = "unsupported: " + str(e)
    res["ok"] = bool(ok)
    with open(os.path.join(out, "mamba_check.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
