#!/usr/bin/python3
"""Writes seed inputs for the chat-template fuzzer into OUT/chat/: the real templates (tests/data/chat/*.jinja),
the ~100 templates of corpus_templates.json, and the small feature templates of expected.json."""
import hashlib
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHAT = os.path.join(ROOT, "tests", "data", "chat")


def main(out_dir):
    out = os.path.join(out_dir, "chat")
    os.makedirs(out, exist_ok=True)
    seeds = {}
    for name in sorted(os.listdir(CHAT)):
        if name.endswith(".jinja"):
            with open(os.path.join(CHAT, name), encoding="utf-8") as f:
                seeds["seed-" + name] = f.read()
    with open(os.path.join(CHAT, "corpus_templates.json"), encoding="utf-8") as f:
        for i, e in enumerate(json.load(f)["templates"]):
            seeds["seed-corpus-%03d" % i] = e["template"]
    with open(os.path.join(CHAT, "expected.json"), encoding="utf-8") as f:
        for c in json.load(f)["features"]:
            t = c["template"]
            seeds["seed-feature-" + hashlib.sha1(t.encode()).hexdigest()[:8]] = t
    for name, text in seeds.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(text)
    print("chat seeds:", len(seeds), "in", out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "seeds")
