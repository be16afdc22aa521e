"""Hostile files through the CLI, as the tester reproduced them (harden-parse): each must be one line on stderr and
exit status 2, never a crash, a raw C++ exception or gigabytes of allocation."""
import json
import os
import shutil

from test_cli import REPO, assert_clean_failure, run

MODELS = os.path.join(REPO, "tests", "data", "models")
TINY_SP = os.path.join(REPO, "tests", "data", "tokenizers", "tiny_sp")


def config_dir(tmp_path, **changes):
    with open(os.path.join(MODELS, "tiny-llama", "config.json")) as f:
        cfg = json.load(f)
    cfg.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


def test_random_weights_with_huge_sizes(tmp_path):
    # vocab and hidden of 2^31: a wrapped size product filled a zero-byte buffer (f32: SIGSEGV; bf16: a raw
    # std::bad_array_new_length); 2^31 layers grew to 23 GB before failing.
    for dtype in ("f32", "bf16"):
        d = config_dir(tmp_path, vocab_size=2**31, hidden_size=2**31)
        p = run("generate", "-m", d, "--random-weights", "--dtype", dtype, "--prompt-ids", "1,2", "-n", "1")
        assert_clean_failure(p, '"vocab_size" must be an integer in [1, 16777216]')
        assert p.returncode == 2
    d = config_dir(tmp_path, num_hidden_layers=2**31)
    p = run("generate", "-m", d, "--random-weights", "--prompt-ids", "1,2", "-n", "1")
    assert_clean_failure(p, '"num_hidden_layers" must be an integer in [1, 1024]')
    # Within every limit but terabytes in total: refused against the memory there is, before allocating.
    d = config_dir(tmp_path, vocab_size=2**24, hidden_size=2**17)
    p = run("generate", "-m", d, "--random-weights", "--prompt-ids", "1,2", "-n", "1")
    assert_clean_failure(p, "--random-weights", "GiB", "available")


def test_absurd_floats_are_refused_naming_the_field(tmp_path):
    d = config_dir(tmp_path, rms_norm_eps=1e308)
    assert_clean_failure(run("generate", "-m", d, "--random-weights", "--prompt-ids", "1", "-n", "1"),
                         '"rms_norm_eps" must be in [1e-12, 0.1]')


def test_tokenizer_with_deeply_nested_sequence(tmp_path):
    with open(os.path.join(TINY_SP, "tokenizer.json")) as f:
        tok = json.load(f)
    tok["decoder"] = "@@"
    deep = '{"type":"Sequence","decoders":[' * 50000 + '{"type":"Fuse"}' + "]}" * 50000  # 1.8 MB, as reported
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok).replace('"@@"', deep))
    p = run("tokenize", "-m", str(tmp_path), "hello")
    assert_clean_failure(p, "tokenizer.json", "nested deeper than 64")
    assert p.returncode == 2


def test_non_finite_weight_is_named(tmp_path):
    # +inf in a projection weight: generation used to exit 0 with logits 122% off.
    d = tmp_path / "m"
    shutil.copytree(os.path.join(MODELS, "tiny-llama-bf16"), d)
    st = d / "model.safetensors"
    raw = bytearray(st.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    info = json.loads(raw[8:8 + n])["model.layers.0.self_attn.q_proj.weight"]
    at = 8 + n + info["data_offsets"][0] + 2 * 10
    raw[at:at + 2] = (0x7F80).to_bytes(2, "little")  # bf16 +inf
    st.write_bytes(bytes(raw))
    p = run("generate", "-m", str(d), "--prompt-ids", "1,2", "-n", "1")
    assert_clean_failure(p, "model.layers.0.self_attn.q_proj.weight", "+inf")
