#!/usr/bin/python3
"""Hugging Face Llama / Gemma 3 checkpoint -> GGUF v3, written with numpy only (no gguf-py, no torch).

Follows llama.cpp's conventions so the files look like convert_hf_to_gguf.py output: its metadata keys and tensor
names, q_proj/k_proj rows permuted for interleaved RoPE (Llama only), Gemma 3 norm weights stored as 1 + w,
llama3 RoPE baked into a rope_freqs tensor, 1-D tensors kept f32, the rest in the requested type (f32, f16, bf16,
q8_0; q8_0 falls back to f16 when a row is not whole 32-element blocks).

Keys llama.cpp does not write but hard-codes for Gemma 3 are added so nothing is lost for non-standard configs:
gemma3.attention.sliding_window_pattern (bool per layer, true = sliding), gemma3.rope.freq_base_swa,
gemma3.attention.scale (1/sqrt(query_pre_attn_scalar)) and gemma3.attn_logit_softcapping.

usage: hf_to_gguf.py MODEL_DIR OUT.gguf [--outtype f32|f16|bf16|q8_0] [--alignment 32]
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# ggml tensor types
T_F32, T_F16, T_Q8_0, T_BF16 = 0, 1, 8, 30
# llama.cpp's general.file_type values
FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}


# ---- reading safetensors ------------------------------------------------------------------------------------------

def read_safetensors(path):
    """name -> float32 array (bf16/f16 widened), from one .safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack_from("<Q", raw, 0)[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        buf = raw[base + b:base + e]
        dt = t["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: tensor {name!r} has dtype {dt}; this converter reads F32, F16, BF16")
        out[name] = (a.reshape(t["shape"]), dt)
    return out


def read_checkpoint(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    tensors = {}
    for s in shards:
        tensors.update(read_safetensors(os.path.join(model_dir, s)))
    return tensors


# ---- llama.cpp conventions ----------------------------------------------------------------------------------------

def permute_rows(w, n_head):
    """Within each head, HF row j*half+i goes to row 2*i+j (llama.cpp's interleaved RoPE layout)."""
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_to_gguf_name(name, arch):
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if name in fixed:
        return fixed[name]
    parts = name.split(".")
    if len(parts) < 5 or parts[:2] != ["model", "layers"]:
        return None
    bid, rest = parts[2], ".".join(parts[3:])
    stem, suffix = rest.rsplit(".", 1)
    block = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    if arch == "llama":
        block["post_attention_layernorm"] = "ffn_norm"
    else:
        block.update({"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
                      "post_feedforward_layernorm": "post_ffw_norm"})
    if stem not in block:
        return None
    return f"blk.{bid}.{block[stem]}.{suffix}"


def rope_params(cfg):
    """(theta, scaling dict or None) for Llama from either the transformers 5 or the legacy config spelling."""
    rp = cfg.get("rope_parameters")
    if rp:
        theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
        scaling = None if rp.get("rope_type", "default") == "default" else rp
        return theta, scaling
    return cfg.get("rope_theta", 10000.0), cfg.get("rope_scaling")


def llama3_rope_factors(theta, dim, s):
    factor = s.get("factor", 8.0)
    lo, hi = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old = s.get("original_max_position_embeddings", 8192)
    lw, hw = old / lo, old / hi
    out = []
    for i in range(0, dim, 2):
        freq = 1.0 / (theta ** (i / dim))
        wl = 2 * math.pi / freq
        if wl < hw:
            out.append(1.0)
        elif wl > lw:
            out.append(factor)
        else:
            sm = (old / wl - lo) / (hi - lo)
            out.append(1 / ((1 - sm) / factor + sm))
    return np.array(out, dtype=np.float32)


# ---- encodings ----------------------------------------------------------------------------------------------------

def to_bf16_bits(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7f800000) == 0x7f800000
    r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan & ((u & 0x7fffff) != 0)] = ((u[nan & ((u & 0x7fffff) != 0)] >> 16) | 0x40).astype(np.uint16)
    return r


def quantize_q8_0(a):
    """Blocks of 32 along rows: f16 scale d = max|x|/127, int8 q = round-half-away(x/d)."""
    x = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, 32)
    d = np.abs(x).max(axis=1, keepdims=True) / 127.0
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(d == 0, 0.0, 1.0 / d)
    v = x * inv
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).clip(-127, 127).astype(np.int8)
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def encode(a, ttype):
    if ttype == T_F32:
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if ttype == T_F16:
        return np.ascontiguousarray(a, dtype="<f2").tobytes()
    if ttype == T_BF16:
        return to_bf16_bits(a).astype("<u2").tobytes()
    if ttype == T_Q8_0:
        return quantize_q8_0(a)
    raise ValueError(ttype)


# ---- GGUF writer --------------------------------------------------------------------------------------------------

class Writer:
    def __init__(self, alignment):
        self.kv = []          # (key, type, value)
        self.tensors = []     # (name, shape (PyTorch order), ttype, bytes)
        self.alignment = alignment

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _val(self, vtype, v):
        fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", U64: "<Q", I64: "<q",
               F64: "<d"}
        if vtype in fmt:
            return struct.pack(fmt[vtype], v)
        if vtype == BOOL:
            return struct.pack("<B", 1 if v else 0)
        if vtype == STRING:
            return self._str(v)
        if vtype == ARRAY:
            etype, items = v
            out = struct.pack("<IQ", etype, len(items))
            return out + b"".join(self._val(etype, i) for i in items)
        raise ValueError(vtype)

    def write(self, path):
        out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
        for key, vtype, value in self.kv:
            out += self._str(key) + struct.pack("<I", vtype) + self._val(vtype, value)
        pad = lambda n: (-n) % self.alignment  # noqa: E731
        offset = 0
        offsets = []
        for name, shape, ttype, data in self.tensors:
            offsets.append(offset)
            ne = list(reversed(shape))  # GGUF lists dims innermost first
            out += self._str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
            out += struct.pack("<IQ", ttype, offset)
            offset += len(data) + pad(len(data))
        out += b"\0" * pad(len(out))
        for (name, shape, ttype, data), off in zip(self.tensors, offsets):
            out += data + b"\0" * pad(len(data))
        with open(path, "wb") as f:
            f.write(out)


def convert(model_dir, out_path, outtype, alignment=32):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    archs = cfg.get("architectures", [])
    if "LlamaForCausalLM" in archs:
        arch = "llama"
    elif "Gemma3ForCausalLM" in archs:
        arch = "gemma3"
    else:
        raise SystemExit(f"{model_dir}: architectures {archs} (this converter handles LlamaForCausalLM, Gemma3ForCausalLM)")
    tensors = read_checkpoint(model_dir)
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim") or hidden // heads
    layers = cfg["num_hidden_layers"]

    w = Writer(alignment)
    w.add("general.architecture", STRING, arch)
    w.add("general.name", STRING, os.path.basename(os.path.normpath(model_dir)))
    w.add("general.file_type", U32, FILE_TYPE[outtype])
    if outtype == "q8_0":
        w.add("general.quantization_version", U32, 2)
    if alignment != 32:
        w.add("general.alignment", U32, alignment)
    a = arch + "."
    w.add(a + "context_length", U32, cfg.get("max_position_embeddings", 4096))
    w.add(a + "embedding_length", U32, hidden)
    w.add(a + "block_count", U32, layers)
    w.add(a + "feed_forward_length", U32, cfg["intermediate_size"])
    w.add(a + "attention.head_count", U32, heads)
    w.add(a + "attention.head_count_kv", U32, kv_heads)
    w.add(a + "attention.key_length", U32, head_dim)
    w.add(a + "attention.value_length", U32, head_dim)
    w.add(a + "attention.layer_norm_rms_epsilon", F32, cfg.get("rms_norm_eps", 1e-6 if arch == "gemma3" else 1e-5))
    w.add(a + "vocab_size", U32, cfg["vocab_size"])
    w.add(a + "rope.dimension_count", U32, head_dim)
    extra = []
    if arch == "llama":
        theta, scaling = rope_params(cfg)
        w.add(a + "rope.freq_base", F32, theta)
        st = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
        if st == "linear":
            w.add(a + "rope.scaling.type", STRING, "linear")
            w.add(a + "rope.scaling.factor", F32, scaling["factor"])
        elif st == "llama3":
            extra.append(("rope_freqs.weight", llama3_rope_factors(theta, head_dim, scaling)))
        elif st not in (None, "default"):
            raise SystemExit(f"{model_dir}: rope type {st} not handled")
    else:
        rp = cfg.get("rope_parameters") or {}
        full = rp.get("full_attention", {})
        local = rp.get("sliding_attention", {})
        w.add(a + "rope.freq_base", F32, full.get("rope_theta", cfg.get("rope_theta", 1e6)))
        w.add(a + "rope.freq_base_swa", F32, local.get("rope_theta", cfg.get("rope_local_base_freq", 10000.0)))
        sc = full if full.get("rope_type", "default") != "default" else (cfg.get("rope_scaling") or {})
        if sc.get("rope_type", sc.get("type")) == "linear":
            w.add(a + "rope.scaling.type", STRING, "linear")
            w.add(a + "rope.scaling.factor", F32, sc["factor"])
        w.add(a + "attention.sliding_window", U32, cfg["sliding_window"])
        types = cfg.get("layer_types") or [
            "full_attention" if (i + 1) % cfg.get("sliding_window_pattern", 6) == 0 else "sliding_attention"
            for i in range(layers)]
        w.add(a + "attention.sliding_window_pattern", ARRAY, (BOOL, [t == "sliding_attention" for t in types]))
        w.add(a + "attention.scale", F32, 1.0 / math.sqrt(cfg.get("query_pre_attn_scalar", head_dim)))
        if cfg.get("final_logit_softcapping"):
            w.add(a + "final_logit_softcapping", F32, cfg["final_logit_softcapping"])
        if cfg.get("attn_logit_softcapping"):
            w.add(a + "attn_logit_softcapping", F32, cfg["attn_logit_softcapping"])
    w.add("tokenizer.ggml.model", STRING, "none")  # the tiny fixtures have no tokenizer files
    for hf_key, g_key in (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("pad_token_id", "padding")):
        v = cfg.get(hf_key)
        if isinstance(v, list):
            v = v[0] if v else None
        if v is not None:
            w.add(f"tokenizer.ggml.{g_key}_token_id", U32, v)

    tie = cfg.get("tie_word_embeddings", arch == "gemma3")
    want = {"f32": T_F32, "f16": T_F16, "bf16": T_BF16, "q8_0": T_Q8_0}[outtype]
    for name in sorted(tensors):
        arr, _ = tensors[name]
        if name == "lm_head.weight" and (tie or arch == "gemma3"):
            continue
        gname = hf_to_gguf_name(name, arch)
        if gname is None:
            raise SystemExit(f"{model_dir}: no GGUF name for tensor {name!r}")
        arr = arr.astype(np.float32)
        if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            arr = permute_rows(arr, heads)
        if arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            arr = permute_rows(arr, kv_heads)
        if arch == "gemma3" and name.endswith("norm.weight"):
            arr = arr + np.float32(1.0)
        ttype = want
        if arr.ndim < 2:
            ttype = T_F32
        elif ttype == T_Q8_0 and arr.shape[-1] % 32 != 0:
            ttype = T_F16
        w.tensors.append((gname, list(arr.shape), ttype, encode(arr, ttype)))
    for gname, arr in extra:
        w.tensors.append((gname, list(arr.shape), T_F32, encode(arr, T_F32)))
    w.write(out_path)
    return out_path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f32", "f16", "bf16", "q8_0"], default="f16")
    ap.add_argument("--alignment", type=int, default=32)
    args = ap.parse_args()
    convert(args.model_dir, args.out, args.outtype, args.alignment)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
