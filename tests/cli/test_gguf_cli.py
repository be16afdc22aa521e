"""A lone .gguf file (tests/data/gguf/tiny-qwen3-kquant.gguf: K-quant matrices, the tokenizer and chat template in its
metadata) runs `flashkit generate -p TEXT` and `flashkit chat` with nothing beside it."""
import os
import shutil
import subprocess

from test_cli import CLI, REPO, run

KQUANT = os.path.join(REPO, "tests", "data", "gguf", "tiny-qwen3-kquant.gguf")


def lone_copy(tmp_path):
    dst = tmp_path / "model.gguf"
    shutil.copy(KQUANT, dst)
    return str(dst)


def test_generate_text_from_lone_gguf(tmp_path):
    p = run("generate", "-m", lone_copy(tmp_path), "-p", "the cat sat", "-n", "6", "--temp", "0", "--ignore-eos")
    assert p.returncode == 0, p.stderr
    assert "qwen3 q4_k on cpu" in p.stderr
    assert p.stdout.strip()
    ids = run("generate", "-m", lone_copy(tmp_path), "-p", "the cat sat", "-n", "6", "--temp", "0", "--ignore-eos",
              "--ids")
    assert ids.returncode == 0, ids.stderr


def test_chat_from_lone_gguf(tmp_path):
    p = subprocess.run([CLI, "chat", "-m", lone_copy(tmp_path), "-n", "4", "--temp", "0"], input="hello\n",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
