"""flashkit loads in any order with numpy and torch (issue 22: on the GPU machine flashkit.torch imported first
aborted and numpy first made Model() crash, two OpenBLAS / OpenMP copies in one process): each order runs in a fresh
interpreter (import_order_check.py: attention against a reference, then the shipped model generating), and every
order generates the same text. Also: attention loads only libflashkit_core.so (no PCRE2 / ICU, no engine library);
the first Model or Tokenizer loads the rest."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir, "python"))
CHECK = os.path.join(HERE, "import_order_check.py")

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:  # pragma: no cover
    HAVE_TORCH = False

ORDERS = [
    ("flashkit", "numpy"),
    ("numpy", "flashkit"),
    ("flashkit", "numpy", "torch"),
    ("torch", "numpy", "flashkit"),
    ("numpy", "torch", "flashkit"),
    ("flashkit.torch", "numpy"),
]


def _run(args, timeout=120):
    path = os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=PYTHON_DIR + (os.pathsep + path if path else ""))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def expected_text():
    r = _run([CHECK, "flashkit"])
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr
    return r.stdout.split(": ", 1)[1]


@pytest.mark.parametrize("order", ORDERS, ids=[",".join(o) for o in ORDERS])
def test_import_order(order, expected_text):
    if any("torch" in m for m in order) and not HAVE_TORCH:
        pytest.skip("torch is not installed")
    r = _run([CHECK, *order])
    assert r.returncode == 0, "exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr)
    assert r.stdout.startswith("ok " + ",".join(order) + ": ")
    assert r.stdout.split(": ", 1)[1] == expected_text


_MAPS = """
import sys, flashkit, numpy as np
def mapped():
    return open("/proc/self/maps").read()
q = np.ones((1, 3, 1, 8), np.float32) * np.arange(8, dtype=np.float32)
flashkit.attention(q, q, q)
m = mapped()
assert "libflashkit_core.so" in m, "attention did not load libflashkit_core.so"
for lib in ("libflashkit.so", "libicuuc", "libpcre2"):
    assert lib not in m, "attention alone loaded " + lib
flashkit.Tokenizer(sys.argv[1]).encode("hi")
m = mapped()
assert "libflashkit.so" in m and "libicuuc" in m and "libpcre2" in m, "the tokenizer did not load the engine library"
print("ok")
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps (Linux)")
def test_attention_loads_only_the_core_library():
    tok = os.path.join(HERE, os.pardir, os.pardir, "models", "target")
    r = _run(["-c", _MAPS, tok])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
