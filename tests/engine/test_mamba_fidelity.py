"""Mamba (model_type "mamba") in the engine: flashkit's logits on a tiny random MambaForCausalLM checkpoint against
the independent float64 numpy forward of mamba_numpy.py (rel <= 1e-4 in f32), the recurrent state across chunked
prefill and decode steps, generation, and bad checkpoints (clear errors). transformers' own logits are compared on
the GPU machine (tools/gpu/mamba.sh, tools/gpu/make_mamba_fixtures.py)."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "python")))

import flashkit  # noqa: E402
import mamba_numpy  # noqa: E402

IDS = [3, 17, 42, 5, 88, 1, 0, 64, 23, 23, 9, 70, 31]


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("mamba_tiny"))
    cfg = mamba_numpy.tiny_config()
    w = mamba_numpy.random_weights(cfg, seed=1)
    mamba_numpy.write_checkpoint(d, cfg, w)
    return d, cfg, w


@pytest.mark.parametrize("use_bias,conv_bias,rank", [(False, True, "auto"), (True, False, 7)])
def test_logits_match_numpy_reference(tmp_path, use_bias, conv_bias, rank):
    cfg = mamba_numpy.tiny_config(use_bias=use_bias, use_conv_bias=conv_bias, time_step_rank=rank)
    w = mamba_numpy.random_weights(cfg, seed=2)
    mamba_numpy.write_checkpoint(str(tmp_path), cfg, w)
    ref = mamba_numpy.forward(cfg, mamba_numpy.load_safetensors(str(tmp_path / "model.safetensors")), IDS)
    m = flashkit.Model(str(tmp_path), dtype="f32")
    got = m.session().prefill(IDS, all_logits=True)
    assert got.shape == ref.shape
    assert rel(got, ref) <= 1e-4


def test_state_carries_over_chunks_and_decode(ckpt):
    d, cfg, w = ckpt
    ref = mamba_numpy.forward(cfg, w, IDS)
    m = flashkit.Model(d, dtype="f32")
    s = m.session()
    s.prefill(IDS[:5])
    s.prefill(IDS[5:9])
    for t in IDS[9:-1]:
        s.decode(t)
    last = s.decode(IDS[-1])
    assert s.position == len(IDS)
    assert rel(last, ref[-1]) <= 1e-4
    s.reset()  # the recurrent state is cleared: the same answer again
    assert rel(s.prefill(IDS), ref[-1]) <= 1e-4


def test_generate_greedy_follows_reference(ckpt):
    d, cfg, w = ckpt
    m = flashkit.Model(d, dtype="f32")
    out = m.generate(IDS[:4], max_new_tokens=5, temperature=0.0)
    toks = list(out.tokens) if hasattr(out, "tokens") else list(out)
    seq = list(IDS[:4])
    for _ in range(len(toks)):
        seq.append(int(np.argmax(mamba_numpy.forward(cfg, w, seq)[-1])))
    assert toks == seq[4:4 + len(toks)]


def _broken(tmp_path, cfg_change=None, drop=None):
    cfg = mamba_numpy.tiny_config()
    w = mamba_numpy.random_weights(cfg, seed=3)
    if drop:
        del w[drop]
    cfg.update(cfg_change or {})
    mamba_numpy.write_checkpoint(str(tmp_path), cfg, w)
    return str(tmp_path)


@pytest.mark.parametrize("change,needle", [
    ({"intermediate_size": 100}, '"intermediate_size" 100 is not expand (2) x hidden_size (64) = 128'),
    ({"time_step_rank": "big"}, '"time_step_rank" must be "auto" or an integer'),
    ({"conv_kernel": 40}, '"conv_kernel" must be an integer in [1, 16], got 40'),
    ({"state_size": 0}, '"state_size" must be an integer in [1, 256], got 0'),
    ({"state_size": 16}, 'tensor "backbone.layers.0.mixer.x_proj.weight" has shape [20, 128], expected [36, 128]'),
])
def test_inconsistent_config_is_rejected(tmp_path, change, needle):
    d = _broken(tmp_path, cfg_change=change)
    with pytest.raises(flashkit.InvalidArgumentError) as e:
        flashkit.Model(d)
    assert needle in str(e.value)


@pytest.mark.parametrize("missing", ["backbone.layers.1.mixer.conv1d.weight", "backbone.layers.0.mixer.A_log",
                                     "backbone.layers.0.mixer.D", "backbone.layers.1.mixer.conv1d.bias",
                                     "backbone.norm_f.weight"])
def test_missing_tensor_is_named(tmp_path, missing):
    d = _broken(tmp_path, drop=missing)
    with pytest.raises(flashkit.InvalidArgumentError) as e:
        flashkit.Model(d)
    assert 'missing tensor "%s"' % missing in str(e.value)
