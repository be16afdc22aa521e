#!/usr/bin/python3
"""Hugging Face tokenizer.json (+ tokenizer_config.json) -> the tokenizer.ggml.* metadata llama.cpp's converter
writes, and a vocab-only GGUF holding just that (llama.cpp ships such files too). numpy-free, no gguf-py.

  byte-level BPE (a ByteLevel pre-tokenizer): model "gpt2", tokens by id, merges as "a b", pre from --pre
  SentencePiece-style BPE (byte_fallback, "▁"):  model "llama", tokens by id with scores; a merged piece scores
      minus the rank of the first merge that makes it (earlier merges score higher, as in SentencePiece models);
      pieces no merge makes score -1e9 below every merged one (user-defined pieces take part, as in llama.cpp)
Token types: 2 unknown, 3 control (special added tokens), 4 user defined (other added tokens), 6 byte (<0xNN>),
1 normal. Ids: bos/eos/unk/pad from tokenizer_config.json names, add_bos_token from the post-processor.

usage: hf_tokenizer_to_gguf.py TOKENIZER_DIR OUT.gguf [--pre llama-bpe]
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_to_gguf import ARRAY, BOOL, F32, I32, STRING, U32, Writer  # noqa: E402


def tokenizer_metadata(tok_dir, pre="llama-bpe"):
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    cfg = {}
    if os.path.exists(os.path.join(tok_dir, "tokenizer_config.json")):
        with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    model = tj["model"]
    vocab = dict(model["vocab"])
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    for i, a in added.items():
        vocab.setdefault(a["content"], i)
    n = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    for s, i in vocab.items():
        tokens[i] = s
    spm = bool(model.get("byte_fallback"))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    types = []
    for i, s in enumerate(tokens):
        if i in added:
            types.append(3 if added[i].get("special") else 4)
        elif spm and s == model.get("unk_token"):
            types.append(2)
        elif spm and re.fullmatch(r"<0x[0-9A-F]{2}>", s):
            types.append(6)
        else:
            types.append(1)
    kv = [("tokenizer.ggml.model", STRING, "llama" if spm else "gpt2")]
    if not spm:
        kv.append(("tokenizer.ggml.pre", STRING, pre))
    kv.append(("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)))
    if spm:
        rank = {}
        for r, m in enumerate(merges):
            rank.setdefault(m.replace(" ", ""), r)
        scores = [float(-rank[s]) if s in rank and types[i] in (1, 4) else -1e9 for i, s in enumerate(tokens)]
        kv.append(("tokenizer.ggml.scores", ARRAY, (F32, scores)))
    kv.append(("tokenizer.ggml.token_type", ARRAY, (I32, types)))
    if not spm:
        kv.append(("tokenizer.ggml.merges", ARRAY, (STRING, merges)))

    def name(key):
        v = cfg.get(key)
        return v.get("content") if isinstance(v, dict) else v

    for key, gkey in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        if name(key) in vocab:
            kv.append((f"tokenizer.ggml.{gkey}_token_id", U32, vocab[name(key)]))
    pp = json.dumps(tj.get("post_processor"))
    bos_name = None
    m = re.search(r'"SpecialToken": \{"id": "([^"]+)"', pp)
    if m:
        bos_name = m.group(1)
        if "bos_token" not in cfg and bos_name in vocab:
            kv.append(("tokenizer.ggml.bos_token_id", U32, vocab[bos_name]))
    kv.append(("tokenizer.ggml.add_bos_token", BOOL, bos_name is not None))
    if isinstance(cfg.get("chat_template"), str):
        kv.append(("tokenizer.chat_template", STRING, cfg["chat_template"]))
    return kv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tok_dir")
    ap.add_argument("out")
    ap.add_argument("--pre", default="llama-bpe")
    args = ap.parse_args()
    w = Writer(32)
    w.add("general.architecture", STRING, "llama")
    w.add("general.name", STRING, os.path.basename(os.path.normpath(args.tok_dir)) + "-vocab")
    for key, t, v in tokenizer_metadata(args.tok_dir, args.pre):
        w.add(key, t, v)
    w.write(args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
