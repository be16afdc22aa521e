"""flashkit generate | chat through the command line (FLASHKIT_CLI=<binary>; see test_cli.py).

The tiny fixtures (tests/data/models) have random weights and no tokenizer files, so most runs pass token ids
(--prompt-ids) and read ids back (--ids); a text run pairs tiny-llama with the tiny byte-level tokenizer from
tests/data/tokenizers (vocabulary 275 < 512) and the Llama 3 chat template from tests/data/chat.
"""
import json
import os
import shutil
import subprocess

import pytest

from test_cli import CLI, REPO, assert_clean_failure, run

MODELS = os.path.join(REPO, "tests", "data", "models")
LLAMA = os.path.join(MODELS, "tiny-llama")
GEMMA = os.path.join(MODELS, "tiny-gemma3")
GEMMA_BF16 = os.path.join(MODELS, "tiny-gemma3-bf16")


def expected(model_dir):
    with open(os.path.join(model_dir, "expected.json")) as f:
        return json.load(f)


def ids_arg(ids):
    return ",".join(str(i) for i in ids)


def out_ids(proc):
    return [int(x) for x in proc.stdout.split()]


# --- greedy continuations equal transformers' ----------------------------------------------------------

@pytest.mark.parametrize("model", [LLAMA, GEMMA])
def test_generate_greedy_ids_match_transformers(model):
    e = expected(model)
    p = run("generate", "-m", model, "--prompt-ids", ids_arg(e["prompt_ids"]), "-n", "64", "--temp", "0",
            "--ignore-eos", "--ids", "--dtype", "f32")
    assert p.returncode == 0, p.stderr
    assert out_ids(p) == e["greedy_ids"]
    # The report: time to first token, prefill and decode tokens/s.
    assert "time to first token" in p.stderr
    assert "prefill" in p.stderr and "decode" in p.stderr and "tok/s" in p.stderr


def test_generate_prompt_ids_from_a_file(tmp_path):
    """--prompt-ids @FILE: commas or white space; the same tokens as the ids on the command line."""
    e = expected(LLAMA)
    f = tmp_path / "ids.txt"
    ids = e["prompt_ids"]
    f.write_text(" ".join(map(str, ids[:3])) + "\n" + ",".join(map(str, ids[3:])) + "\n")
    p = run("generate", "-m", LLAMA, "--prompt-ids", f"@{f}", "-n", "64", "--temp", "0", "--ignore-eos", "--ids",
            "--dtype", "f32")
    assert p.returncode == 0, p.stderr
    assert out_ids(p) == e["greedy_ids"]
    assert_clean_failure(run("generate", "-m", LLAMA, "--prompt-ids", f"@{tmp_path / 'none.txt'}"),
                         "--prompt-ids", "cannot read")
    assert_clean_failure(run("generate", "-m", LLAMA, "--prompt-ids", "@"), "--prompt-ids", "file name")
    (tmp_path / "empty.txt").write_text("\n")
    assert_clean_failure(run("generate", "-m", LLAMA, "--prompt-ids", f"@{tmp_path / 'empty.txt'}"),
                         "--prompt-ids", "no ids")


def test_generate_bf16_and_profile_and_stats_json(tmp_path):
    e = expected(GEMMA_BF16)
    stats = tmp_path / "stats.json"
    p = run("generate", "-m", GEMMA_BF16, "--prompt-ids", ids_arg(e["prompt_ids"]), "-n", "16", "--temp", "0",
            "--ignore-eos", "--profile", "--stats-json", str(stats))
    assert p.returncode == 0, p.stderr
    got = out_ids(p)  # no tokenizer: ids are printed
    assert len(got) == 16
    agree = sum(a == b for a, b in zip(got, e["greedy_ids"][:16]))
    assert agree >= 12, (got, e["greedy_ids"][:16])
    assert "attention" in p.stderr and "linear" in p.stderr
    s = json.loads(stats.read_text())
    assert s["weight_dtype"] == "bf16"
    assert s["prompt_tokens"] == 40 and s["generated_tokens"] == 16
    assert s["prefill_tokens_per_s"] > 0 and s["decode_tokens_per_s"] > 0
    assert "attention" in s["ops"]


def test_generate_profile_trace(tmp_path):
    trace = tmp_path / "trace.json"
    p = run("generate", "-m", LLAMA, "--prompt-ids", "1,2,3", "-n", "4", "--ids", "--profile", "--trace", str(trace))
    assert p.returncode == 0, p.stderr
    t = json.loads(trace.read_text())
    names = {e["name"] for e in t["traceEvents"]}
    assert {"linear.qkv", "linear.lm_head", "attention", "rms_norm"} <= names, names
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in t["traceEvents"])
    starts = [e["ts"] for e in t["traceEvents"]]
    assert starts == sorted(starts)
    q = run("generate", "-m", LLAMA, "--prompt-ids", "1,2,3", "-n", "4", "--ids", "--trace", str(trace))
    assert q.returncode != 0 and "--trace needs --profile" in q.stderr


def test_generate_sampling_is_seeded():
    e = expected(LLAMA)
    args = ["generate", "-m", LLAMA, "--prompt-ids", ids_arg(e["prompt_ids"]), "-n", "12", "--temp", "1.0",
            "--top-k", "50", "--top-p", "0.9", "--ignore-eos", "-q"]
    a, b, c = run(*args, "--seed", "5"), run(*args, "--seed", "5"), run(*args, "--seed", "6")
    assert a.returncode == 0 and b.returncode == 0 and c.returncode == 0, a.stderr
    assert out_ids(a) == out_ids(b)
    assert out_ids(a) != out_ids(c)
    assert a.stderr == ""  # -q: no report


def test_generate_output_file(tmp_path):
    e = expected(LLAMA)
    out = tmp_path / "out.txt"
    p = run("generate", "-m", LLAMA, "--prompt-ids", ids_arg(e["prompt_ids"]), "-n", "8", "--temp", "0",
            "--ignore-eos", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert [int(x) for x in out.read_text().split()] == e["greedy_ids"][:8]
    assert p.stdout == ""


def test_generate_random_weights_config_file():
    cfg = os.path.join(GEMMA, "config.json")
    p = run("generate", "-m", cfg, "--random-weights", "--prompt-ids", "2,3,4,5", "-n", "5", "--temp", "0",
            "--ignore-eos")
    assert p.returncode == 0, p.stderr
    assert len(out_ids(p)) == 5


# --- text in, text out, chat ----------------------------------------------------------------------------

@pytest.fixture
def llama_with_tokenizer(tmp_path):
    d = tmp_path / "tiny-llama-tok"
    shutil.copytree(LLAMA, d)
    shutil.copy(os.path.join(REPO, "tests", "data", "tokenizers", "tiny_bytelevel", "tokenizer.json"), d)
    with open(os.path.join(REPO, "tests", "data", "chat", "llama3.jinja")) as f:
        template = f.read()
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": template,
           "tokenizer_class": "PreTrainedTokenizerFast"}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return str(d)


def test_generate_text_prompt_streams_text(llama_with_tokenizer):
    p = run("generate", "-m", llama_with_tokenizer, "-p", "hello world", "-n", "10", "--temp", "0",
            "--ignore-eos")
    assert p.returncode == 0, p.stderr
    assert p.stdout.endswith("\n")
    assert "time to first token" in p.stderr
    q = run("generate", "-m", llama_with_tokenizer, "-p", "hello world", "-n", "10", "--temp", "0",
            "--ignore-eos", "--ids")
    assert q.returncode == 0, q.stderr
    assert len(out_ids(q)) == 10


def test_generate_reports_why_it_stopped(llama_with_tokenizer):
    # A stop string ends generation through the printer; the report must name it, not the internal "callback".
    args = ("generate", "-m", llama_with_tokenizer, "-p", "The capital of France is", "--temp", "0", "--ignore-eos")
    p = run(*args, "-n", "24")
    assert p.returncode == 0, p.stderr
    assert "(stop: length)" in p.stderr, p.stderr
    text = p.stdout.strip()
    stop = next((c for c in text[3:] if c.isalnum()), None)
    assert stop, "the greedy continuation has no letter to stop on: " + repr(text)
    q = run(*args, "-n", "24", "--stop", stop)
    assert q.returncode == 0, q.stderr
    assert "(stop: stop string)" in q.stderr, q.stderr
    assert stop not in q.stdout[len(text[:3]):] or len(q.stdout) < len(p.stdout)


def test_chat_multi_turn(llama_with_tokenizer):
    p = subprocess.run([CLI, "chat", "-m", llama_with_tokenizer, "-n", "6", "--temp", "0", "--ignore-eos"],
                       input="hi there\nand again\n/exit\n", capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("decode") >= 2  # a line per turn, then the report
    assert "time to first token" in p.stderr


def test_chat_needs_a_template(tmp_path):
    assert_clean_failure(run("chat", "-m", LLAMA), "tokenizer.json")


@pytest.mark.parametrize("template,message", [
    ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "nesting deeper than 200"),
    ("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "render budget exceeded"),
    ("{{ 'x' * 100000000000 }}", "output limit exceeded"),
])
def test_chat_hostile_template_fails_cleanly(llama_with_tokenizer, template, message):
    # tokenizer_config.json is untrusted: a hostile chat template is one line on stderr and exit status 2.
    cfg_path = os.path.join(llama_with_tokenizer, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["chat_template"] = template
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    p = subprocess.run([CLI, "chat", "-m", llama_with_tokenizer, "-n", "2"], input="hi\n", capture_output=True,
                       text=True, timeout=120)
    assert_clean_failure(p, "chat template", message)
    assert p.returncode == 2, p.stderr


# --- bad input --------------------------------------------------------------------------------------------

def test_bad_inputs(tmp_path):
    ids = ["--prompt-ids", "1,2,3"]
    assert_clean_failure(run("generate", "-m", str(tmp_path / "nope"), *ids), "nope")
    assert_clean_failure(run("generate", "-m", LLAMA, *ids, "-n", "0"), "--max-tokens")
    assert_clean_failure(run("generate", "-m", LLAMA, *ids, "--dtype", "int3"), "int3")
    assert_clean_failure(run("generate", "-m", LLAMA, *ids, "--temp", "-1"), "--temp")
    assert_clean_failure(run("generate", "-m", LLAMA, "--prompt-ids", "1,x"), "--prompt-ids")
    assert_clean_failure(run("generate", "-m", LLAMA, "--prompt-ids", "1,999"), "999")
    assert_clean_failure(run("generate", "-m", LLAMA, "-p", "hello"), "--prompt-ids")
    assert_clean_failure(run("generate", "-m", LLAMA), "prompt")
    assert_clean_failure(run("generate", "-m", LLAMA, *ids, "-o", str(tmp_path / "no" / "such" / "dir.txt")),
                         "--output")
    assert_clean_failure(run("generate", "-m", LLAMA, *ids, "--stats-json", str(tmp_path / "no" / "s.json")),
                         "--stats-json")
    long_prompt = ids_arg(range(1, 41))
    assert_clean_failure(run("generate", "-m", LLAMA, "--prompt-ids", long_prompt, "--ctx", "16"), "context")
    p = run("generate", "-m", LLAMA, *ids, "--device", "cuda")
    if p.returncode != 0:
        assert_clean_failure(p, "CUDA")


def test_bad_model_files(tmp_path):
    ids = ["--prompt-ids", "1,2,3"]
    d = tmp_path / "m"
    shutil.copytree(GEMMA, d)
    st = d / "model.safetensors"
    with open(st, "r+b") as f:
        f.truncate(os.path.getsize(st) // 3)
    assert_clean_failure(run("generate", "-m", str(d), *ids), "model.safetensors")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "mamba"
    (d / "config.json").write_text(json.dumps(cfg))
    assert_clean_failure(run("generate", "-m", str(d), *ids), "mamba")
    (d / "config.json").unlink()
    assert_clean_failure(run("generate", "-m", str(d), *ids), "config.json")
    e = tmp_path / "e"
    shutil.copytree(LLAMA, e)
    os.remove(e / "model-00003-of-00003.safetensors")
    assert_clean_failure(run("generate", "-m", str(e), *ids), "model-00003-of-00003.safetensors")


def test_generate_gguf():
    e = expected(LLAMA)
    gguf = os.path.join(REPO, "tests", "data", "gguf", "tiny-llama-f16.gguf")
    p = run("generate", "-m", gguf, "--prompt-ids", ids_arg(e["prompt_ids"]), "-n", "16", "--temp", "0",
            "--ignore-eos", "--ids")
    assert p.returncode == 0, p.stderr
    got = out_ids(p)
    assert sum(a == b for a, b in zip(got, e["greedy_ids"][:16])) >= 12, got
