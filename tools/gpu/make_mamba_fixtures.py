#!/usr/bin/env python3
"""The transformers half of the Mamba fidelity check (GPU machine: transformers 5.x, torch 2.x): makes a tiny random
MambaForCausalLM, saves it (config.json + model.safetensors) and transformers' logits on a fixed prompt (CPU,
float32 and float64) as JSON. This process only writes files: it imports torch and transformers and nothing else
that loads a native library (no numpy import of its own, no flashkit: run s8-2 died with SIGSEGV in the process that
held torch, transformers, numpy and flashkit together, issue 22). tools/gpu/mamba_check.py compares in another
process.
  make_mamba_fixtures.py OUTDIR       writes OUTDIR/tiny/ and OUTDIR/tiny_logits.json
"""
import faulthandler
import json
import os
import sys

faulthandler.enable()  # a native crash prints the Python stack into the log instead of a bare rc=139

PROMPT = [3, 17, 42, 5, 88, 1, 0, 64, 23, 23, 9, 70, 31, 2, 95, 50]


def step(msg):
    print("make_mamba_fixtures: " + msg, flush=True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "mamba-fixtures"
    os.makedirs(out, exist_ok=True)
    import torch
    torch.set_num_threads(1)  # tiny model; one thread keeps torch's OpenMP pool out of the picture
    from transformers import MambaConfig, MambaForCausalLM
    step("torch %s imported" % torch.__version__)
    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=96, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4,
                      use_conv_bias=True, use_bias=False, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
    model = MambaForCausalLM(cfg).float().eval()
    with torch.no_grad():  # move the parameters away from their initial values (D = 1, biases 0, ...)
        for _, p in model.named_parameters():
            p.add_(torch.randn_like(p) * 0.05)
    d = os.path.join(out, "tiny")
    model.save_pretrained(d)  # safetensors (the default in transformers 4.x and 5.x)
    step("saved " + d)
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        l32 = model(ids).logits[0].double().tolist()
        step("float32 forward done")
        l64 = model.double()(ids).logits[0].tolist()
        step("float64 forward done")
    # JSON floats round-trip exactly (repr), and reading them back needs no torch.
    with open(os.path.join(out, "tiny_logits.json"), "w") as f:
        json.dump({"prompt": PROMPT, "transformers": __import__("transformers").__version__,
                   "torch": torch.__version__, "logits_f32": l32, "logits_f64": l64}, f)
    step("wrote " + os.path.join(out, "tiny_logits.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
