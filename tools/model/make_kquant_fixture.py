#!/usr/bin/python3
"""Writes tests/data/gguf/tiny-qwen3-kquant.gguf: a random 1-layer Qwen3 (q/k norms, GQA) whose matrices use every
block-quantized type flashkit reads, the way llama.cpp's Q4_K_M mixes them: q_proj, gate and the embedding Q4_K,
k_proj and up Q5_K, v_proj Q6_K, o_proj Q4_0 and down Q8_0 (their rows are 128 values, not whole 256-value
K-quant blocks: llama.cpp falls back to a 32-block type for such rows too). Deterministic (seed 0). It carries
the tokenizer of tests/data/tokenizers/tiny_bytelevel (gpt2 / llama-bpe) and a chat template, so the one file
runs `flashkit generate` and `chat`.

The encoders pick valid parameters (not llama.cpp's error-minimising search): the engine only needs files laid out
as llama.cpp lays them out. Layouts: src/model/quant.hpp.

usage: make_kquant_fixture.py [OUT.gguf]
       make_kquant_fixture.py --bench [OUT.gguf]   (1024 hidden, 4 layers, Q4_K/Q6_K: for benchmarks)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_to_gguf import F32, STRING, U32, T_F32, T_Q8_0, Writer, encode  # noqa: E402
from hf_tokenizer_to_gguf import tokenizer_metadata  # noqa: E402

T_Q4_0, T_Q4_K, T_Q5_K, T_Q6_K = 2, 12, 13, 14


def f16_round(a):
    return a.astype(np.float16).astype(np.float32)


def f16_bytes(a):
    return a.astype("<f2").view(np.uint8).reshape(len(a), 2)


def q4_0(x):
    b = x.reshape(-1, 32)
    amax_i = np.abs(b).argmax(1)
    d = f16_round(b[np.arange(len(b)), amax_i] / -8.0)
    inv = np.where(d == 0, 0, 1 / np.where(d == 0, 1, d))
    q = np.clip(np.round(b * inv[:, None]) + 8, 0, 15).astype(np.uint8)
    out = np.zeros((len(b), 18), np.uint8)
    out[:, :2] = f16_bytes(d)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def k_scales(sc, mn):
    """12 bytes of eight 6-bit scales and mins (sub-blocks 4..7 split into 4 low bits + 2 high bits)."""
    s = np.zeros((len(sc), 12), np.uint8)
    s[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    s[:, 4:8] = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    s[:, 8:12] = (sc[:, 4:] & 15) | ((mn[:, 4:] & 15) << 4)
    return s


def q45_k(x, bits):
    b = x.reshape(-1, 8, 32)
    levels = (1 << bits) - 1
    lo = np.minimum(b.min(2), 0)
    scale = (b.max(2) - lo) / levels
    d = f16_round(scale.max(1) / 63)
    dmin = f16_round((-lo).max(1) / 63)
    safe = lambda v: np.where(v == 0, 1, v)  # noqa: E731
    sc = np.clip(np.round(scale / safe(d)[:, None]), 0, 63).astype(np.uint8)
    mn = np.clip(np.round(-lo / safe(dmin)[:, None]), 0, 63).astype(np.uint8)
    es = d[:, None] * sc
    em = dmin[:, None] * mn
    q = np.clip(np.round((b + em[:, :, None]) / safe(es)[:, :, None]), 0, levels).astype(np.uint8)
    q = q.reshape(-1, 256)
    out = [f16_bytes(d), f16_bytes(dmin), k_scales(sc, mn)]
    if bits == 5:
        qh = np.zeros((len(q), 32), np.uint8)
        for k in range(8):
            qh |= ((q[:, 32 * k:32 * k + 32] >> 4) & 1) << k
        out.append(qh)
    qs = np.zeros((len(q), 128), np.uint8)
    for g in range(4):
        qs[:, 32 * g:32 * g + 32] = (q[:, 64 * g:64 * g + 32] & 15) | ((q[:, 64 * g + 32:64 * g + 64] & 15) << 4)
    out.append(qs)
    return np.concatenate(out, axis=1).tobytes()


def q6_k(x):
    b = x.reshape(-1, 16, 16)
    amax_i = np.abs(b).argmax(2)
    scale = np.take_along_axis(b, amax_i[:, :, None], 2)[:, :, 0] / -32.0
    d = f16_round(np.abs(scale).max(1) / 127)
    safe = lambda v: np.where(v == 0, 1, v)  # noqa: E731
    sc = np.clip(np.round(scale / safe(d)[:, None]), -128, 127).astype(np.int8)
    es = d[:, None] * sc
    q = np.clip(np.round(b / safe(es)[:, :, None]) + 32, 0, 63).astype(np.uint8).reshape(-1, 256)
    ql = np.zeros((len(q), 128), np.uint8)
    qh = np.zeros((len(q), 64), np.uint8)
    for h in range(2):
        v = q[:, 128 * h:128 * h + 128]
        ql[:, 64 * h:64 * h + 32] = (v[:, 0:32] & 15) | ((v[:, 64:96] & 15) << 4)
        ql[:, 64 * h + 32:64 * h + 64] = (v[:, 32:64] & 15) | ((v[:, 96:128] & 15) << 4)
        for k in range(4):
            qh[:, 32 * h:32 * h + 32] |= (v[:, 32 * k:32 * k + 32] >> 4) << (2 * k)
    return np.concatenate([ql, qh, sc.view(np.uint8), f16_bytes(d)], axis=1).tobytes()


ENCODERS = {T_Q4_0: q4_0, T_Q4_K: lambda x: q45_k(x, 4), T_Q5_K: lambda x: q45_k(x, 5), T_Q6_K: q6_k,
            T_Q8_0: lambda x: encode(x, T_Q8_0), T_F32: lambda x: encode(x, T_F32)}


def make(out_path, hidden=256, heads=2, kv_heads=1, hd=64, inter=128, layers=1, types=None):
    """types: GGUF type per tensor kind (embd, q, k, v, o, gate, up, down); the default is the test fixture's mix."""
    t_embd, t_q, t_k, t_v, t_o, t_gate, t_up, t_down = types or (T_Q4_K, T_Q4_K, T_Q5_K, T_Q6_K, T_Q4_0, T_Q4_K,
                                                                 T_Q5_K, T_Q8_0)
    rng = np.random.default_rng(0)
    here = os.path.dirname(os.path.abspath(__file__))
    tok = tokenizer_metadata(os.path.join(here, "..", "..", "tests", "data", "tokenizers", "tiny_bytelevel"),
                             "llama-bpe")
    vocab = len(dict((k, v) for k, _, v in tok)["tokenizer.ggml.tokens"][1])
    a = "qwen3."
    w = Writer(32)
    w.add("general.architecture", STRING, "qwen3")
    w.add("general.name", STRING, "tiny-qwen3-kquant")
    w.add("general.file_type", U32, 15)  # llama.cpp's MOSTLY_Q4_K_M
    w.add("general.quantization_version", U32, 2)
    for key, v in (("context_length", 256), ("embedding_length", hidden), ("block_count", layers),
                   ("feed_forward_length", inter), ("attention.head_count", heads),
                   ("attention.head_count_kv", kv_heads), ("attention.key_length", hd),
                   ("attention.value_length", hd)):
        w.add(a + key, U32, v)
    w.add(a + "rope.freq_base", F32, 1000000.0)
    w.add(a + "attention.layer_norm_rms_epsilon", F32, 1e-6)
    for key, t, v in tok:  # the tokenizer travels in the file, as in llama.cpp's GGUFs
        w.add(key, t, v)
    w.add("tokenizer.chat_template", STRING,
          "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>{{ m['content'] }}<|eot_id|>"
          "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>{% endif %}")

    def mat(rows, cols, std=0.06):
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def vec(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    tensors = [("token_embd.weight", mat(vocab, hidden, 1.0), t_embd), ("output_norm.weight", vec(hidden), T_F32)]
    for i in range(layers):
        b = f"blk.{i}."
        tensors += [
            (b + "attn_norm.weight", vec(hidden), T_F32),
            (b + "ffn_norm.weight", vec(hidden), T_F32),
            (b + "attn_q_norm.weight", vec(hd), T_F32),
            (b + "attn_k_norm.weight", vec(hd), T_F32),
            (b + "attn_q.weight", mat(heads * hd, hidden), t_q),
            (b + "attn_k.weight", mat(kv_heads * hd, hidden), t_k),
            (b + "attn_v.weight", mat(kv_heads * hd, hidden), t_v),
            (b + "attn_output.weight", mat(hidden, heads * hd), t_o),
            (b + "ffn_gate.weight", mat(inter, hidden), t_gate),
            (b + "ffn_up.weight", mat(inter, hidden), t_up),
            (b + "ffn_down.weight", mat(hidden, inter), t_down),
        ]
    for name, arr, t in tensors:
        w.tensors.append((name, list(arr.shape), t, ENCODERS[t](arr)))
    w.write(out_path)
    return out_path


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    args = [a for a in sys.argv[1:] if a != "--bench"]
    if "--bench" in sys.argv:  # a larger all-K-quant model for benchmarks (not a fixture): Q4_K_M-like mix
        out = args[0] if args else "bench-qwen3-q4_k_m.gguf"
        make(out, hidden=1024, heads=8, kv_heads=2, hd=128, inter=2816, layers=4,
             types=(T_Q4_K, T_Q4_K, T_Q4_K, T_Q6_K, T_Q4_K, T_Q4_K, T_Q4_K, T_Q6_K))
    else:
        out = args[0] if args else os.path.join(here, "..", "..", "tests", "data", "gguf", "tiny-qwen3-kquant.gguf")
        make(out)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")
