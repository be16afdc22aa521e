#!/usr/bin/env python3
"""Checks tests/data/chat/expected.json (rendered with jinja2 set up as transformers sets it up, by
render_expected.py) against transformers' own `tokenizer.apply_chat_template`, byte for byte.

Each real template in tests/data/chat/*.jinja gets a tokenizer built from local files only (no network): the
tracked tests/data/tokenizers/tiny_bytelevel/tokenizer.json plus a tokenizer_config.json that declares the family's
bos/eos tokens (render_expected.TOKENS) and carries the template, loaded with AutoTokenizer.from_pretrained. Every
case of expected.json ("cases": messages, add_generation_prompt, extra kwargs such as date_string or
enable_thinking) is rendered with apply_chat_template(tokenize=False) and compared with the stored output; a case
stored as an error must raise. The corpus cases (~100 templates of many families, corpus_templates.json) go through
the same call with the template passed as chat_template=. Finally `render_expected.py --use-transformers --check`
runs in its own process (transformers' internal renderer; it also covers the interpreter feature cases).

  check_transformers.py [--json OUT] [--no-render-expected]
Exit status 0 when everything matches, 1 otherwise (mismatches listed in the JSON with the first differing byte).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = ROOT / "tests" / "data" / "chat"
TOKENIZER_JSON = ROOT / "tests" / "data" / "tokenizers" / "tiny_bytelevel" / "tokenizer.json"
sys.path.insert(0, str(HERE))
import render_expected as RE  # noqa: E402  (TOKENS, CORPUS_KWARGS)


def first_diff(a, b):
    """Index of the first differing character of two strings (len of the shorter one if one is a prefix)."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n if len(a) != len(b) else None)


def describe(got, want):
    i = first_diff(got, want)
    if i is None:
        return None
    return {"offset": i, "got": got[max(0, i - 30): i + 50], "want": want[max(0, i - 30): i + 50],
            "got_len": len(got), "want_len": len(want)}


def check_case(render, case_input, want_output, want_error):
    """render(...) -> str or raises. Returns (status, detail); status one of identical, mismatch,
    error_as_expected, missing_error, unexpected_error."""
    try:
        got = render(case_input)
    except Exception as e:  # noqa: BLE001 - template errors and Python errors alike
        msg = "%s: %s" % (type(e).__name__, e)
        if want_error is not None:
            return "error_as_expected", {"got_error": msg[:300], "want_error": want_error[:300]}
        return "unexpected_error", {"got_error": msg[:500]}
    if want_error is not None:
        return "missing_error", {"got": got[:300], "want_error": want_error[:300]}
    d = describe(got, want_output)
    return ("identical", None) if d is None else ("mismatch", d)


def as_text(out):
    """apply_chat_template(tokenize=False) returns a str (a list of one str for batched input in some versions)."""
    if isinstance(out, str):
        return out
    if isinstance(out, (list, tuple)) and len(out) == 1 and isinstance(out[0], str):
        return out[0]
    raise TypeError("apply_chat_template(tokenize=False) returned %s, not a str" % type(out).__name__)


def make_tokenizer(tmp, key, bos, eos, template=None):
    """AutoTokenizer from a local directory: the tiny tokenizer.json plus a tokenizer_config.json declaring bos/eos
    (and the chat template). Returns (tokenizer, how the template got there)."""
    from transformers import AutoTokenizer
    d = Path(tmp) / key
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(TOKENIZER_JSON, d / "tokenizer.json")
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos or None, "eos_token": eos,
           "model_max_length": 1 << 20}
    if template is not None:
        cfg["chat_template"] = template
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False), encoding="utf-8")
    try:
        tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True)
        how = "tokenizer_config.json"
    except Exception as e:  # noqa: BLE001 - the tokenizer class directly, from the same files
        import transformers
        tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"), bos_token=bos or None,
                                                   eos_token=eos)
        tok.chat_template = template
        return tok, "PreTrainedTokenizerFast(tokenizer_file=...) (AutoTokenizer failed: %s: %s)" % (
            type(e).__name__, str(e)[:200])
    if template is not None and getattr(tok, "chat_template", None) != template:
        # some versions keep templates only in chat_template.jinja: say so, and set it directly
        how = "assigned (tokenizer_config.json's chat_template was not picked up: %r)" % (
            type(getattr(tok, "chat_template", None)).__name__)
        tok.chat_template = template
    return tok, how


def run_cases(expected, tmp):
    out = {"total": 0, "counts": {}, "problems": [], "tokenizers": {}}
    toks = {}
    for c in expected["cases"]:
        name = c["template"]
        if name not in toks:
            template = (DATA / name).read_text(encoding="utf-8")
            bos, eos = RE.TOKENS[name]
            toks[name], how = make_tokenizer(tmp, name.replace(".", "_"), bos, eos, template)
            out["tokenizers"][name] = {"template_from": how, "bos_token": toks[name].bos_token,
                                       "eos_token": toks[name].eos_token}
        tok = toks[name]

        def render(c=c, tok=tok):
            return as_text(tok.apply_chat_template(c["messages"], tokenize=False,
                                                   add_generation_prompt=c["add_generation_prompt"], **c["extra"]))

        status, detail = check_case(lambda _: render(), None, c.get("output"), c.get("error"))
        out["total"] += 1
        out["counts"][status] = out["counts"].get(status, 0) + 1
        if status not in ("identical", "error_as_expected"):
            out["problems"].append({"template": name, "conversation": c["conversation"],
                                    "add_generation_prompt": c["add_generation_prompt"], "extra": c["extra"],
                                    "status": status, "detail": detail})
    return out


def run_corpus(expected, templates, tmp):
    out = {"total": 0, "counts": {}, "problems": []}
    if not expected.get("corpus"):
        return out
    kw = dict(expected.get("corpus_kwargs", RE.CORPUS_KWARGS))
    tok, _ = make_tokenizer(tmp, "corpus", kw.pop("bos_token", "<s>"), kw.pop("eos_token", "</s>"))
    convs = expected["corpus_conversations"]
    for c in expected["corpus"]:
        template = templates[c["index"]]["template"]

        def render(_, c=c, template=template):
            return as_text(tok.apply_chat_template(convs[c["conversation"]], chat_template=template, tokenize=False,
                                                   add_generation_prompt=c["add_generation_prompt"], **kw))

        status, detail = check_case(render, None, c.get("output"), c.get("error"))
        out["total"] += 1
        out["counts"][status] = out["counts"].get(status, 0) + 1
        if status not in ("identical", "error_as_expected"):
            uses_date = "strftime_now" in template
            out["problems"].append({"index": c["index"], "model": c["model"], "conversation": c["conversation"],
                                    "status": status, "detail": detail, "template_uses_strftime_now": uses_date})
    return out


def run_render_expected():
    """render_expected.py --use-transformers --check in its own process."""
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, str(HERE / "render_expected.py"), "--use-transformers", "--check"],
                           capture_output=True, text=True, timeout=300)
        text = (p.stdout + p.stderr).strip()
        return {"rc": p.returncode, "output": text[-2000:], "s": round(time.time() - t0, 1)}
    except subprocess.TimeoutExpired:
        return {"rc": None, "output": "timeout", "s": round(time.time() - t0, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None, help="write the summary here")
    ap.add_argument("--expected", type=Path, default=DATA / "expected.json")
    ap.add_argument("--no-render-expected", action="store_true",
                    help="skip render_expected.py --use-transformers --check")
    a = ap.parse_args(argv)
    t0 = time.time()
    res = {"expected": str(a.expected)}
    try:
        import jinja2
        import transformers
        res["transformers"], res["jinja2"] = transformers.__version__, jinja2.__version__
        expected = json.loads(a.expected.read_text(encoding="utf-8"))
        templates = json.loads((DATA / "corpus_templates.json").read_text(encoding="utf-8"))["templates"]
        with tempfile.TemporaryDirectory(prefix="fk-chat-") as tmp:
            res["cases"] = run_cases(expected, tmp)
            res["corpus"] = run_corpus(expected, templates, tmp)
    except Exception as e:  # noqa: BLE001 - recorded, then the JSON is still written
        import traceback
        traceback.print_exc()
        res["error"] = "%s: %s" % (type(e).__name__, e)
    if not a.no_render_expected:
        res["render_expected_check"] = run_render_expected()
    ok = "error" not in res and not res["cases"]["problems"] and not res["corpus"]["problems"]
    if "render_expected_check" in res:
        ok = ok and res["render_expected_check"]["rc"] == 0
    res["pass"] = ok
    res["s"] = round(time.time() - t0, 1)
    if a.json:
        Path(a.json).write_text(json.dumps(res, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for part in ("cases", "corpus"):
        if part in res:
            r = res[part]
            print("chat %s: %d rendered through apply_chat_template, %s" % (part, r["total"], json.dumps(r["counts"])))
            for p in r["problems"][:10]:
                print("  ", json.dumps(p, ensure_ascii=False)[:400])
    if "render_expected_check" in res:
        print("render_expected.py --use-transformers --check: rc=%s %s" % (
            res["render_expected_check"]["rc"], res["render_expected_check"]["output"].splitlines()[-1:]))
    print("chat templates vs transformers:", "PASS" if ok else "FAIL", "(%.1f s)" % res["s"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
