#!/usr/bin/env python3
"""A random Mamba model at state-spaces/mamba-130m-hf's shape (24 layers, hidden 768, d_inner 1536, d_state 16, vocab
50280, tied embeddings) written by transformers itself (config.json + model.safetensors, f32), for the decode
roofline of tools/gpu/ssm_cuda.sh (`flashkit_ssm_bench decode DIR`): decode time depends on the shapes, not on the
weights' values, and the GPU machine has no network to fetch the real checkpoint. Imports torch and transformers only
(issue 22: no flashkit in the process that holds torch).
  make_mamba_decode_model.py OUTDIR [SIZE]
SIZE: one of the state-spaces/mamba-*-hf shapes, 130m (default; f32 file), 370m, 790m, 1.4b, 2.8b (bf16 files: the
larger ones are written in bf16, as those checkpoints are published, to keep the file and its load time small).
"""
import os
import sys


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "mamba-130m-random"
    size = sys.argv[2] if len(sys.argv) > 2 else "130m"
    shapes = {"130m": (24, 768), "370m": (48, 1024), "790m": (48, 1536), "1.4b": (48, 2048), "2.8b": (64, 2560)}
    if size not in shapes:
        print("make_mamba_decode_model: SIZE must be one of %s, got %r" % (", ".join(shapes), size), file=sys.stderr)
        return 2
    layers, hidden = shapes[size]
    import torch
    from transformers import MambaConfig, MambaForCausalLM
    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=50280, hidden_size=hidden, state_size=16, num_hidden_layers=layers, expand=2,
                      conv_kernel=4, use_conv_bias=True, use_bias=False, tie_word_embeddings=True,
                      bos_token_id=0, eos_token_id=0)
    dtype = torch.float32 if size == "130m" else torch.bfloat16
    torch.set_default_dtype(dtype)  # initialize in the file's dtype: no f32 copy of a 2.8b model
    model = MambaForCausalLM(cfg).to(dtype).eval()
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print("make_mamba_decode_model: %d parameters -> %s" % (n, out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
