"""Speculative decoding through Python: Model.generate(..., draft=, lookup=, tree_width=, draft_tokens=) gives the
greedy output of plain generate(), fills last_spec_stats, and rejects bad arguments (TypeError / InvalidArgumentError)."""
import os

import pytest

import flashkit
from flashkit.errors import InvalidArgumentError

MODELS = os.path.join(os.path.dirname(__file__), os.pardir, "data", "models")
PROMPT = [1, 5, 6, 7, 8, 9, 5, 6, 7, 8, 10, 11, 5, 6, 7]


@pytest.fixture(scope="module")
def models():
    with flashkit.Model(os.path.join(MODELS, "tiny-gemma3"), dtype="f32") as t, \
            flashkit.Model(os.path.join(MODELS, "tiny-gemma3-bf16")) as d:
        yield t, d


@pytest.mark.parametrize("kw", [
    dict(lookup=3),
    dict(lookup=2, tree_width=4, draft_tokens=6),
    dict(draft="D", draft_tokens=3),
    dict(draft="D", draft_tokens="auto", max_draft_tokens=5),
    dict(draft="T", draft_tokens=4),  # the model as its own draft: everything accepted
])
def test_speculative_greedy_equals_plain(models, kw):
    t, d = models
    kw = dict(kw)
    if kw.get("draft") == "D":
        kw["draft"] = d
    elif kw.get("draft") == "T":
        kw["draft"] = t
    base = t.generate(PROMPT, max_new_tokens=32)
    got = t.generate(PROMPT, max_new_tokens=32, **kw)
    assert got == base
    st = t.last_spec_stats
    assert st["steps"] >= 1 and 0 <= st["accepted"] <= st["proposed"]
    assert st["emitted"] == len(got) - 1
    if kw.get("draft") is t:
        assert st["accepted"] == st["proposed"] > 0


def test_speculative_sampling_runs(models):
    t, d = models
    ids = t.generate(PROMPT, max_new_tokens=20, temperature=0.8, top_k=20, seed=5, draft=d)
    assert 1 <= len(ids) <= 20 and all(0 <= i < t.vocab_size for i in ids)


def test_speculative_bad_arguments(models):
    t, d = models
    with pytest.raises(TypeError, match="draft"):
        t.generate(PROMPT, draft="not a model")
    with pytest.raises(InvalidArgumentError, match="draft_tokens"):
        t.generate(PROMPT, lookup=2, draft_tokens=0)
    with pytest.raises(TypeError, match="draft_tokens"):
        t.generate(PROMPT, lookup=2, draft_tokens="many")
    with pytest.raises(InvalidArgumentError, match="lookup"):
        t.generate(PROMPT, lookup=65)
    with pytest.raises(InvalidArgumentError, match="tree_width"):
        t.generate(PROMPT, lookup=2, tree_width=0)
    with pytest.raises(InvalidArgumentError, match="lookup >= 1"):
        t.generate(PROMPT, draft=d, tree_width=3)
