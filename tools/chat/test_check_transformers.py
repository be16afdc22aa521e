"""Tests of tools/chat/check_transformers.py without transformers: a stand-in `transformers` package whose
AutoTokenizer reads the tokenizer_config.json the checker writes and renders with render_expected's jinja2 set-up
(what expected.json was made with), so every case must come out identical; a tampered expected.json must be
reported case by case.

    /usr/bin/python3 -m pytest -q tools/chat/test_check_transformers.py      (needs jinja2)
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
pytest.importorskip("jinja2")

FAKE = '''
import json, os, sys
__version__ = "stand-in"
sys.path.insert(0, %r)
from render_expected import make_jinja_renderer
_render = make_jinja_renderer()[0]

class _Tok:
    def __init__(self, cfg):
        self.bos_token, self.eos_token = cfg.get("bos_token"), cfg.get("eos_token")
        self.chat_template = cfg.get("chat_template")

    def apply_chat_template(self, conversation, chat_template=None, tokenize=True, add_generation_prompt=False, **kw):
        assert tokenize is False
        special = {k: v for k, v in (("bos_token", self.bos_token), ("eos_token", self.eos_token)) if v is not None}
        return _render(chat_template or self.chat_template, conversation, add_generation_prompt, dict(special, **kw))

class AutoTokenizer:
    @staticmethod
    def from_pretrained(path, local_files_only=False):
        assert local_files_only and os.path.exists(os.path.join(path, "tokenizer.json"))
        with open(os.path.join(path, "tokenizer_config.json")) as f:
            return _Tok(json.load(f))
''' % str(HERE)


@pytest.fixture()
def fake_env(tmp_path):
    pkg = tmp_path / "fake" / "transformers"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE)
    return dict(os.environ, PYTHONPATH=str(tmp_path / "fake"))


def run(env, *args):
    return subprocess.run([sys.executable, str(HERE / "check_transformers.py"), "--no-render-expected", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_all_cases_identical_with_the_reference_renderer(tmp_path, fake_env):
    out = tmp_path / "chat.json"
    p = run(fake_env, "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(out.read_text())
    assert r["pass"] and r["transformers"] == "stand-in"
    assert r["cases"]["total"] == 140 and r["cases"]["problems"] == []
    assert r["cases"]["counts"] == {"identical": 128, "error_as_expected": 12}
    assert r["corpus"]["total"] == 194 and r["corpus"]["problems"] == []
    assert r["cases"]["tokenizers"]["qwen3.jinja"]["bos_token"] is None
    assert "PASS" in p.stdout


def test_tampered_expected_is_reported(tmp_path, fake_env):
    exp = json.loads((HERE.parents[1] / "tests" / "data" / "chat" / "expected.json").read_text(encoding="utf-8"))
    exp["cases"][0]["output"] = exp["cases"][0]["output"][:10] + "X" + exp["cases"][0]["output"][11:]
    raising = next(i for i, c in enumerate(exp["cases"]) if "error" in c)
    del exp["cases"][raising]["error"]
    exp["cases"][raising]["output"] = "never"
    exp["corpus"][0]["error"] = "SomeError: made up"
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(exp, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "chat.json"
    p = run(fake_env, "--json", str(out), "--expected", str(path))
    assert p.returncode == 1
    r = json.loads(out.read_text())
    probs = {(q["status"]) for q in r["cases"]["problems"]}
    assert probs == {"mismatch", "unexpected_error"}
    mm = next(q for q in r["cases"]["problems"] if q["status"] == "mismatch")
    assert mm["detail"]["offset"] == 10
    assert r["corpus"]["problems"][0]["status"] == "missing_error"
    assert not r["pass"] and "FAIL" in p.stdout


def test_missing_transformers_is_an_error_in_the_json(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(tmp_path))  # no transformers here
    out = tmp_path / "chat.json"
    p = run(env, "--json", str(out))
    r = json.loads(out.read_text())
    if "error" not in r:
        pytest.skip("transformers is importable here")
    assert p.returncode == 1 and "transformers" in r["error"] and r["pass"] is False
