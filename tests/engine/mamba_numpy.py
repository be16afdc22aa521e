"""A tiny random Mamba checkpoint in transformers' MambaForCausalLM layout (config.json + model.safetensors, written
with numpy only) and an independent float64 numpy forward pass of it, written from transformers' MambaMixer
semantics (its slow path): the oracle flashkit's engine is compared with on machines without transformers."""
import json
import os
import struct

import numpy as np


def tiny_config(vocab_size=96, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4,
                time_step_rank="auto", use_conv_bias=True, use_bias=False):
    return {"model_type": "mamba", "architectures": ["MambaForCausalLM"], "vocab_size": vocab_size,
            "hidden_size": hidden_size, "state_size": state_size, "num_hidden_layers": num_hidden_layers,
            "expand": expand, "intermediate_size": expand * hidden_size, "conv_kernel": conv_kernel,
            "time_step_rank": time_step_rank, "use_conv_bias": use_conv_bias, "use_bias": use_bias,
            "layer_norm_epsilon": 1e-5, "residual_in_fp32": True, "tie_word_embeddings": True,
            "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32"}


def dt_rank(cfg):
    r = cfg["time_step_rank"]
    return -(-cfg["hidden_size"] // 16) if r == "auto" else r


def random_weights(cfg, seed=0):
    """name -> float32 array, HF names and shapes (A_log as transformers initializes it: log(1..N) per channel)."""
    rng = np.random.default_rng(seed)
    H, N, K = cfg["hidden_size"], cfg["state_size"], cfg["conv_kernel"]
    Di, R = cfg["expand"] * H, dt_rank(cfg)

    def rnd(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {"backbone.embeddings.weight": rnd(cfg["vocab_size"], H, scale=0.5),
         "backbone.norm_f.weight": (1 + rnd(H, scale=0.1)).astype(np.float32)}
    for i in range(cfg["num_hidden_layers"]):
        p = "backbone.layers.%d." % i
        w[p + "norm.weight"] = (1 + rnd(H, scale=0.1)).astype(np.float32)
        w[p + "mixer.in_proj.weight"] = rnd(2 * Di, H)
        w[p + "mixer.conv1d.weight"] = rnd(Di, 1, K, scale=0.4)
        if cfg["use_conv_bias"]:
            w[p + "mixer.conv1d.bias"] = rnd(Di, scale=0.1)
        w[p + "mixer.x_proj.weight"] = rnd(R + 2 * N, Di)
        w[p + "mixer.dt_proj.weight"] = rnd(Di, R, scale=0.5)
        w[p + "mixer.dt_proj.bias"] = (rnd(Di, scale=0.5) - 2.0).astype(np.float32)
        a_log = np.log(np.tile(np.arange(1, N + 1, dtype=np.float32), (Di, 1)))
        w[p + "mixer.A_log"] = (a_log + rnd(Di, N, scale=0.05)).astype(np.float32)
        w[p + "mixer.D"] = (1 + rnd(Di, scale=0.2)).astype(np.float32)
        w[p + "mixer.out_proj.weight"] = rnd(H, Di)
        if cfg["use_bias"]:
            w[p + "mixer.in_proj.bias"] = rnd(2 * Di, scale=0.1)
            w[p + "mixer.out_proj.bias"] = rnd(H, scale=0.1)
    return w


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_checkpoint(directory, cfg, weights):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f)
    write_safetensors(os.path.join(directory, "model.safetensors"), weights)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", "this reference reads f32 checkpoints only"
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(e["shape"])
    return out


def _rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _silu(x):
    return x / (1 + np.exp(-x))


def forward(cfg, w, ids):
    """float64 logits [len(ids), vocab] of MambaForCausalLM on one sequence."""
    H, N, K = cfg["hidden_size"], cfg["state_size"], cfg["conv_kernel"]
    Di, R, eps = cfg["expand"] * H, dt_rank(cfg), cfg.get("layer_norm_epsilon", 1e-5)
    g = {k: np.asarray(v, dtype=np.float64) for k, v in w.items()}
    emb = g["backbone.embeddings.weight"]
    h = emb[np.asarray(ids)]
    L = h.shape[0]
    for i in range(cfg["num_hidden_layers"]):
        p = "backbone.layers.%d.mixer." % i
        x = _rms_norm(h, g["backbone.layers.%d.norm.weight" % i], eps)
        xz = x @ g[p + "in_proj.weight"].T + g.get(p + "in_proj.bias", 0)
        xs, z = xz[:, :Di], xz[:, Di:]
        # causal depthwise conv: K - 1 zeros before the sequence
        pad = np.concatenate([np.zeros((K - 1, Di)), xs], axis=0)
        cw = g[p + "conv1d.weight"][:, 0, :]
        conv = np.stack([np.sum(pad[t:t + K, :].T * cw, axis=1) for t in range(L)]) + g.get(p + "conv1d.bias", 0)
        xs = _silu(conv)
        dbc = xs @ g[p + "x_proj.weight"].T
        dt = dbc[:, :R] @ g[p + "dt_proj.weight"].T + g[p + "dt_proj.bias"]
        dt = np.where(dt > 20, dt, np.log1p(np.exp(np.minimum(dt, 20))))
        Bm, Cm = dbc[:, R:R + N], dbc[:, R + N:]
        A = -np.exp(g[p + "A_log"])
        state = np.zeros((Di, N))
        ys = np.zeros((L, Di))
        for t in range(L):
            state = np.exp(dt[t][:, None] * A) * state + (dt[t] * xs[t])[:, None] * Bm[t][None, :]
            ys[t] = state @ Cm[t] + g[p + "D"] * xs[t]
        ys = ys * _silu(z)
        h = h + ys @ g[p + "out_proj.weight"].T + g.get(p + "out_proj.bias", 0)
    h = _rms_norm(h, g["backbone.norm_f.weight"], eps)
    head = g.get("lm_head.weight", emb)
    return h @ head.T
