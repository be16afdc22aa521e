"""pip install of the repository (pyproject.toml + setup.py, offline, no build isolation) into a fresh folder, then
`import flashkit` from another directory without FLASHKIT_LIBRARY: the libraries inside the package are the ones
loaded, py.typed ships, and the installed package generates text. The libraries under test (FLASHKIT_LIBRARY's
folder, else build/lib) are bundled as they are (FLASHKIT_LIBRARY_DIR), so nothing is rebuilt."""

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))

_SCRIPT = """
import os, sys, flashkit
here = os.path.dirname(flashkit.__file__)
assert here.startswith(sys.argv[1]), here
assert flashkit.library_path() == os.path.join(here, "libflashkit_core.so"), flashkit.library_path()
assert flashkit.engine_library_path() == os.path.join(here, "libflashkit.so"), flashkit.engine_library_path()
assert os.path.isfile(os.path.join(here, "py.typed"))
with flashkit.Model(sys.argv[2]) as m:
    print(m.generate("Once upon a time", max_new_tokens=6, temperature=0))
"""


@pytest.mark.skipif(importlib.util.find_spec("pip") is None, reason="pip is not installed (Debian: python3-pip)")
def test_pip_install_and_import_from_elsewhere(tmp_path):
    lib = os.environ.get("FLASHKIT_LIBRARY")
    lib_dir = os.path.dirname(lib) if lib else os.path.join(ROOT, "build", "lib")
    if not os.path.isfile(os.path.join(lib_dir, "libflashkit_core.so")):
        pytest.skip("no built libflashkit_core.so in %s (bash tools/build.sh)" % lib_dir)
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k not in ("FLASHKIT_LIBRARY", "PYTHONPATH")}
    env.update(FLASHKIT_LIBRARY_DIR=lib_dir, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_ROOT_USER_ACTION="ignore")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--target", str(target), ROOT], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("FLASHKIT_LIBRARY", "FLASHKIT_LIBRARY_DIR")}
    env["PYTHONPATH"] = str(target)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([sys.executable, "-c", _SCRIPT, str(target), os.path.join(ROOT, "models", "target")],
                       capture_output=True, text=True, env=env, cwd=str(elsewhere), timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), r.stdout + r.stderr
