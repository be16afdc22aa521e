#!/usr/bin/python3
"""Writes small valid seed inputs for the fuzzers into OUT/{safetensors,gguf,tokenizer,config}/ (numpy only).

Seeds are kept small (a few KB) so libFuzzer mutates headers rather than megabytes of weights: micro Llama and
Gemma 3 checkpoints (every tensor kind, 1-2 layers), converted with tools/model/hf_to_gguf.py to each GGUF type,
plus GGUFs with tokenizer arrays and nested arrays.
"""
import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "model"))
import hf_to_gguf as h2g  # noqa: E402


def safetensors_bytes(tensors, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, arr) in tensors.items():
        if dtype == "BF16":
            raw = h2g.to_bf16_bits(arr).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(arr, dtype={"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def micro_model(arch, dtype, rng):
    hidden, heads, kv, hd, inter, vocab, layers = 32, 2, 1, 16, 32, 16, 2
    cfg = {"hidden_size": hidden, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
           "intermediate_size": inter, "vocab_size": vocab, "num_hidden_layers": layers, "bos_token_id": 1,
           "eos_token_id": 2, "max_position_embeddings": 128}
    t = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    for l in range(layers):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
                  p + "self_attn.q_proj.weight": (heads * hd, hidden), p + "self_attn.k_proj.weight": (kv * hd, hidden),
                  p + "self_attn.v_proj.weight": (kv * hd, hidden), p + "self_attn.o_proj.weight": (hidden, heads * hd),
                  p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
                  p + "mlp.down_proj.weight": (hidden, inter)})
    if arch == "llama":
        cfg.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "rms_norm_eps": 1e-5,
                    "tie_word_embeddings": False,
                    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 8192}})
        t["lm_head.weight"] = (vocab, hidden)
    else:
        cfg.update({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "rms_norm_eps": 1e-6,
                    "tie_word_embeddings": True, "sliding_window": 4, "query_pre_attn_scalar": 16,
                    "layer_types": ["sliding_attention", "full_attention"], "final_logit_softcapping": 30.0,
                    "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})
        for l in range(layers):
            p = f"model.layers.{l}."
            t.update({p + "pre_feedforward_layernorm.weight": (hidden,), p + "post_feedforward_layernorm.weight": (hidden,),
                      p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
    tensors = {n: (dtype, rng.standard_normal(s).astype(np.float32) * 0.1) for n, s in sorted(t.items())}
    return cfg, tensors


def main(out):
    rng = np.random.default_rng(0)
    st_dir, gg_dir = os.path.join(out, "safetensors"), os.path.join(out, "gguf")
    os.makedirs(st_dir, exist_ok=True)
    os.makedirs(gg_dir, exist_ok=True)
    w = lambda d, n, b: open(os.path.join(d, n), "wb").write(b)  # noqa: E731
    # safetensors: each dtype, metadata, a scalar and an empty tensor
    w(st_dir, "seed-mixed.safetensors", safetensors_bytes({
        "a": ("F32", rng.standard_normal((2, 3)).astype(np.float32)),
        "b": ("F16", rng.standard_normal((4,)).astype(np.float32)),
        "c": ("BF16", rng.standard_normal((2, 2, 2)).astype(np.float32)),
        "s": ("F32", np.array(1.5, dtype=np.float32)),
        "e": ("F32", np.zeros((0, 3), dtype=np.float32))}, {"format": "pt"}))
    w(st_dir, "seed-empty.safetensors", safetensors_bytes({}))
    for arch in ("llama", "gemma3"):
        for dtype in ("F32", "BF16"):
            cfg, tensors = micro_model(arch, dtype, rng)
            blob = safetensors_bytes(tensors, {"format": "pt"})
            if dtype == "BF16":
                w(st_dir, f"seed-{arch}.safetensors", blob)
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "config.json"), "w") as f:
                    json.dump(cfg, f)
                w(d, "model.safetensors", blob)
                for outtype in ("f32", "f16", "bf16", "q8_0") if dtype == "F32" else ("bf16",):
                    h2g.convert(d, os.path.join(gg_dir, f"seed-{arch}-{outtype}.gguf"), outtype,
                                64 if outtype == "bf16" else 32)
    # GGUF with a vocabulary and nested arrays (no tensors)
    g = h2g.Writer(32)
    g.add("general.architecture", h2g.STRING, "llama")
    g.add("tokenizer.ggml.model", h2g.STRING, "gpt2")
    g.add("tokenizer.ggml.tokens", h2g.ARRAY, (h2g.STRING, ["<s>", "</s>", "a", "b", "ab"]))
    g.add("tokenizer.ggml.token_type", h2g.ARRAY, (h2g.I32, [3, 3, 1, 1, 1]))
    g.add("tokenizer.ggml.scores", h2g.ARRAY, (h2g.F32, [0.0, 0.0, -1.0, -2.0, -3.0]))
    g.add("tokenizer.ggml.merges", h2g.ARRAY, (h2g.STRING, ["a b"]))
    g.add("nested", h2g.ARRAY, (h2g.ARRAY, [(h2g.U8, [1, 2]), (h2g.I64, [-1])]))
    g.add("u16", h2g.U16, 7)
    g.add("f64", h2g.F64, 0.25)
    g.add("bool", h2g.BOOL, True)
    g.write(os.path.join(gg_dir, "seed-tokenizer.gguf"))
    tokenizer_and_config_seeds(out)


def tokenizer_and_config_seeds(out):
    """tokenizer.json seeds: the tiny fixtures, plus the real Llama 3.1 / Gemma 3 pipelines (normalizer,
    pre-tokenizer regexes, decoder, post-processor, added tokens) over a cut vocabulary when `npm ci` has fetched
    them (9-33 MB files are too big to mutate). config.json seeds: the fixtures and models/configs."""
    tok_dir, cfg_dir = os.path.join(out, "tokenizer"), os.path.join(out, "config")
    os.makedirs(tok_dir, exist_ok=True)
    os.makedirs(cfg_dir, exist_ok=True)
    data = os.path.join(ROOT, "tests", "data")
    for name in sorted(os.listdir(os.path.join(data, "tokenizers"))):
        shutil.copy(os.path.join(data, "tokenizers", name, "tokenizer.json"), os.path.join(tok_dir, name + ".json"))
    for name in ("llama3_1", "gemma3"):
        path = os.path.join(ROOT, "tests", "tokenizer", "node", "node_modules", "@lenml", "tokenizer-" + name,
                            "models", "tokenizer.json")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        m = t["model"]
        vocab = dict(sorted(m["vocab"].items(), key=lambda kv: kv[1])[:400])
        m["vocab"] = vocab
        m["merges"] = [x for x in m["merges"][:3000]
                       if all(p in vocab for p in (x if isinstance(x, list) else x.split(" ", 1)))][:300]
        t["added_tokens"] = t.get("added_tokens", [])[:24]
        with open(os.path.join(tok_dir, "cut-" + name + ".json"), "w", encoding="utf-8") as f:
            json.dump(t, f, ensure_ascii=False)
    for d in sorted(os.listdir(os.path.join(data, "models"))):
        cfg = os.path.join(data, "models", d, "config.json")
        if os.path.exists(cfg):
            shutil.copy(cfg, os.path.join(cfg_dir, d + ".json"))
    for name in sorted(os.listdir(os.path.join(ROOT, "models", "configs"))):
        shutil.copy(os.path.join(ROOT, "models", "configs", name), os.path.join(cfg_dir, name))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "seeds")
