"""Finding and loading the native library; the ctypes struct layouts."""

import ctypes
import os
import subprocess
import sys

import pytest

import flashkit
from flashkit import _capi

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
PYTHON_DIR = os.path.join(REPO, "python")


def _run_import(env_updates, code="import flashkit; print(flashkit.library_path())"):
    env = {k: v for k, v in os.environ.items() if k != "FLASHKIT_LIBRARY"}
    env["PYTHONPATH"] = PYTHON_DIR
    env.update(env_updates)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_missing_flashkit_library_file():
    missing = os.path.join(REPO, "no-such-dir", "libflashkit.so")
    r = _run_import({"FLASHKIT_LIBRARY": missing})
    assert r.returncode != 0
    assert "ImportError" in r.stderr
    assert "FLASHKIT_LIBRARY" in r.stderr and missing in r.stderr and "does not exist" in r.stderr


def test_flashkit_library_not_a_library(tmp_path):
    bogus = tmp_path / "libflashkit.so"
    bogus.write_text("not an ELF file")
    r = _run_import({"FLASHKIT_LIBRARY": str(bogus)})
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "could not load" in r.stderr and str(bogus) in r.stderr


def test_default_discovery_uses_repo_build():
    built = os.path.join(REPO, "build", "lib", "libflashkit.so")
    if not os.path.isfile(built):
        pytest.skip("no ./build/lib/libflashkit.so (run bash tools/build.sh)")
    r = _run_import({})
    assert r.returncode == 0, r.stderr
    # library_path(): the attention library loaded at import, beside the engine library.
    assert os.path.samefile(r.stdout.strip(), os.path.join(os.path.dirname(built), "libflashkit_core.so"))


def test_find_library_path_order(tmp_path):
    pkg = tmp_path / "python" / "flashkit"
    pkg.mkdir(parents=True)
    lib_dir = tmp_path / "build" / "lib"
    lib_dir.mkdir(parents=True)
    explicit = tmp_path / "elsewhere.so"
    explicit.write_text("")

    def no_system(name):
        return None

    # 1. FLASHKIT_LIBRARY wins.
    assert _capi.find_library_path({"FLASHKIT_LIBRARY": str(explicit)}, str(pkg), no_system) == str(explicit)
    # 3. nothing in build/lib: the system search.
    assert _capi.find_library_path({}, str(pkg), lambda name: "libflashkit.so.0") == "libflashkit.so.0"
    # Nothing anywhere: an ImportError saying how to build.
    with pytest.raises(ImportError) as ei:
        _capi.find_library_path({}, str(pkg), no_system)
    msg = str(ei.value)
    assert "bash tools/build.sh" in msg and "FLASHKIT_LIBRARY" in msg
    # 2. <repo>/build/lib relative to the package.
    (lib_dir / "libflashkit.so").write_text("")
    assert _capi.find_library_path({}, str(pkg), no_system) == str(lib_dir / "libflashkit.so")
    # An empty FLASHKIT_LIBRARY counts as unset.
    assert _capi.find_library_path({"FLASHKIT_LIBRARY": ""}, str(pkg), no_system) == str(lib_dir / "libflashkit.so")


def test_struct_layouts_match_the_header():
    assert ctypes.sizeof(_capi.FkTensor) == 88
    assert _capi.FkTensor.shape.offset == 24 and _capi.FkTensor.strides.offset == 56
    assert ctypes.sizeof(_capi.FkAttentionOptions) == 64
    assert _capi.FkAttentionOptions.softcap.offset == 24
    assert _capi.FkAttentionOptions.cu_seqlens_q.offset == 32
    assert _capi.FkAttentionOptions.num_seqs.offset == 48
    assert _capi.FkAttentionOptions.impl.offset == 56
    assert _capi.FkAttentionOptions.check_finite.offset == 60
    assert ctypes.sizeof(_capi.FkCost) == 352 and _capi.FkCost.kernel.offset == 288


def test_options_defaults_come_from_the_library():
    o = _capi.make_options()
    assert (o.scale, o.causal, o.window_left, o.window_right, o.softcap) == (0.0, 0, -1, -1, 0.0)
    assert not o.cu_seqlens_q and not o.cu_seqlens_k and o.num_seqs == 0
    assert o.impl == _capi.FK_IMPL_AUTO and o.check_finite == 1


def test_public_api():
    for name in flashkit.__all__:
        assert hasattr(flashkit, name), name
    assert flashkit.attention.__doc__ and "[batch, seqlen_q, heads, head_dim]" in flashkit.attention.__doc__
    assert flashkit.attention_backward.__doc__
