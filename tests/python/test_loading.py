"""How flashkit._capi finds and opens its two libraries: the package's own folder before the build tree, the core
library beside the engine library, RTLD_LOCAL (and the deepbind switch), and an engine library that cannot load
(PCRE2/ICU missing) leaving attention working while Model / Tokenizer raise an ImportError that says so."""

import os
import subprocess
import sys

import pytest

from flashkit import _capi

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir, "python"))


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return str(path)


def test_package_folder_comes_before_the_build_tree(tmp_path):
    pkg = tmp_path / "python" / "flashkit"
    built = _touch(tmp_path / "build" / "lib" / "libflashkit.so")
    no_system = lambda name: None  # noqa: E731
    assert _capi.find_library_path({}, str(pkg), no_system) == built
    inside = _touch(pkg / "libflashkit.so")
    assert _capi.find_library_path({}, str(pkg), no_system) == inside


def test_core_library_beside_the_engine_library(tmp_path):
    engine = _touch(tmp_path / "libflashkit.so")
    assert _capi.core_library_path(engine, lambda name: None) == engine  # a library from before the split
    assert _capi.core_library_path(engine, lambda name: "libflashkit_core.so.0") == "libflashkit_core.so.0"
    core = _touch(tmp_path / "libflashkit_core.so")
    assert _capi.core_library_path(engine, lambda name: None) == core


def test_dlopen_mode_is_local_and_now():
    mode = _capi._dlopen_mode({})
    assert mode & os.RTLD_NOW and not mode & os.RTLD_GLOBAL
    if hasattr(os, "RTLD_DEEPBIND"):
        assert not mode & os.RTLD_DEEPBIND
        assert _capi._dlopen_mode({"FLASHKIT_DLOPEN": "deepbind"}) & os.RTLD_DEEPBIND


_NO_ENGINE = """
import numpy as np, flashkit
q = np.arange(48, dtype=np.float32).reshape(1, 3, 2, 8) / 48
o, lse = flashkit.attention(q, q, q, causal=True)
assert o.shape == q.shape
for make in (lambda: flashkit.Tokenizer("."), lambda: flashkit.Model(".")):
    try:
        make()
    except ImportError as e:
        assert "attention does not need it" in str(e) and "libflashkit.so" in str(e), str(e)
    else:
        raise AssertionError("no ImportError")
print("ok")
"""


def test_attention_works_when_the_engine_library_cannot_load(tmp_path):
    core = os.path.join(os.path.dirname(_capi.LIBRARY_PATH), "libflashkit_core.so")
    if not os.path.isfile(core):
        pytest.skip("no libflashkit_core.so beside %s" % _capi.LIBRARY_PATH)
    os.symlink(core, tmp_path / "libflashkit_core.so")
    (tmp_path / "libflashkit.so").write_text("an engine library whose dependencies are missing")
    env = dict(os.environ, FLASHKIT_LIBRARY=str(tmp_path / "libflashkit.so"), PYTHONPATH=PYTHON_DIR)
    r = subprocess.run([sys.executable, "-c", _NO_ENGINE], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
