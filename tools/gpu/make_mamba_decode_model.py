#!/usr/bin/env python3
"""A random Mamba model at state-spaces/mamba-130m-hf's shape (24 layers, hidden 768, d_inner 1536, d_state 16, vocab
50280, tied embeddings) written by transformers itself (config.json + model.safetensors, f32), for the decode
roofline of tools/gpu/ssm_cuda.sh (`flashkit_ssm_bench decode DIR`): decode time depends on the shapes, not on the
weights' values, and the GPU machine has no network to fetch the real checkpoint. Imports torch and transformers only
(issue 22: no flashkit in the process that holds torch).
  make_mamba_decode_model.py OUTDIR
"""
import os
import sys


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "mamba-130m-random"
    import torch
    from transformers import MambaConfig, MambaForCausalLM
    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=24, expand=2,
                      conv_kernel=4, use_conv_bias=True, use_bias=False, tie_word_embeddings=True,
                      bos_token_id=0, eos_token_id=0)
    model = MambaForCausalLM(cfg).float().eval()
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print("make_mamba_decode_model: %d parameters -> %s" % (n, out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
