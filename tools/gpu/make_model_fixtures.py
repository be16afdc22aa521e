#!/usr/bin/env python3
"""Builds the small random checkpoints that CI uses to check flashkit's model engine against transformers.

Runs on the GPU machine (transformers is installed there, not here). For each architecture it builds a narrow,
shallow model from the real config's semantics (gemma3_text with local/global layers, soft-capping and linear RoPE
scaling; llama with llama3 RoPE scaling and untied embeddings), randomizes every weight (norm weights too, so the
(1 + w) convention is exercised), saves it with save_pretrained in f32 and bf16, and records what transformers
computes on CPU (no TF32): prefill logits, 64 greedy steps through its own KV cache, and the logits of the first
32 decode steps.

  python3 tools/gpu/make_model_fixtures.py OUTDIR
Writes OUTDIR/<name>/{config.json, model.safetensors (or shards + index), expected.json, *.f32}.
"""
import json, os, sys
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

PROMPT_LEN, GREEDY_STEPS, LOGIT_STEPS = 40, 64, 32

TINY = {
    "tiny-gemma3": dict(
        model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], vocab_size=512, hidden_size=64,
        intermediate_size=160, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=48, sliding_window=8,
        layer_types=["sliding_attention"] * 2 + ["full_attention"] + ["sliding_attention"] * 2 + ["full_attention"],
        rope_theta=1000000.0, rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 8.0},
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, rms_norm_eps=1e-6, max_position_embeddings=4096,
        bos_token_id=2, eos_token_id=1, pad_token_id=0, tie_word_embeddings=True, initializer_range=0.08),
    "tiny-llama": dict(
        model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=512, hidden_size=64,
        intermediate_size=176, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        hidden_act="silu", rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=131072,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, initializer_range=0.08),
}


def build(name, cfg_dict, seed):
    torch.manual_seed(seed)
    d = dict(cfg_dict)
    mt = d.pop("model_type")
    cfg = AutoConfig.for_model(mt, **d)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", torch_dtype=torch.float32)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.normal_(0.0, 0.3)  # Gemma's (1 + w) and Llama's w both get exercised
            else:
                p.normal_(0.0, cfg_dict.get("initializer_range", 0.05))
    return model.eval()


def run_reference(model, prompt):
    """Prefill logits, then greedy decode through transformers' own cache."""
    with torch.no_grad():
        ids = torch.tensor([prompt])
        out = model(input_ids=ids, use_cache=True)
        prefill = out.logits[0].float().clone()
        past = out.past_key_values
        nxt = int(out.logits[0, -1].float().argmax())
        greedy, step_logits = [nxt], []
        for _ in range(GREEDY_STEPS - 1):
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            lg = out.logits[0, -1].float()
            if len(step_logits) < LOGIT_STEPS:
                step_logits.append(lg.clone())
            nxt = int(lg.argmax())
            greedy.append(nxt)
        return prefill, greedy, torch.stack(step_logits)


def save(model, outdir, dtype, prompt, shard=None):
    os.makedirs(outdir, exist_ok=True)
    m = model.to(dtype)
    kw = {"max_shard_size": shard} if shard else {}
    m.save_pretrained(outdir, safe_serialization=True, **kw)
    prefill, greedy, steps = run_reference(m, prompt)
    prefill.numpy().astype("<f4").tofile(os.path.join(outdir, "expected_prefill_logits.f32"))
    steps.numpy().astype("<f4").tofile(os.path.join(outdir, "expected_decode_logits.f32"))
    meta = {"generator": "tools/gpu/make_model_fixtures.py", "transformers": transformers.__version__,
            "torch": torch.__version__, "dtype": str(dtype).replace("torch.", ""), "device": "cpu",
            "prompt_ids": prompt, "greedy_ids": greedy, "vocab_size": model.config.vocab_size,
            "prefill_logits_shape": list(prefill.shape), "decode_logits_shape": list(steps.shape),
            "decode_logits_note": "row i = logits after feeding greedy_ids[i] (the (i+1)-th decode step)"}
    with open(os.path.join(outdir, "expected.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(outdir, dtype, "greedy[:16]", greedy[:16], flush=True)


def main():
    out = sys.argv[1]
    print("transformers", transformers.__version__, "torch", torch.__version__)
    for mod in ("gguf", "jinja2", "tokenizers", "safetensors"):
        try:
            m = __import__(mod); print("have", mod, getattr(m, "__version__", "?"))
        except Exception as e:  # noqa: BLE001 - report and go on
            print("missing", mod, e)
    for i, (name, cfg) in enumerate(TINY.items()):
        model = build(name, cfg, seed=1234 + i)
        g = torch.Generator().manual_seed(99 + i)
        prompt = [cfg["bos_token_id"]] + torch.randint(3, cfg["vocab_size"], (PROMPT_LEN - 1,), generator=g).tolist()
        print(name, "config after load:", json.dumps(model.config.to_dict(), default=str)[:1500])
        save(model, os.path.join(out, name), torch.float32, prompt, shard="300KB" if name == "tiny-llama" else None)
        save(build(name, cfg, seed=1234 + i), os.path.join(out, name + "-bf16"), torch.bfloat16, prompt)


if __name__ == "__main__":
    main()
