"""Builds the flashkit wheel: the Python package (python/flashkit) with libflashkit.so and libflashkit_core.so
inside it, where flashkit._capi looks first. Metadata lives in pyproject.toml.

Where the libraries come from, first match wins:
  1. FLASHKIT_LIBRARY_DIR: a folder holding both already-built libraries (bundled as they are);
  2. the CMake build folder FLASHKIT_BUILD_DIR (default ./build) when it is configured: its two library targets are
     brought up to date there (cmake --build, incremental);
  3. otherwise a fresh CPU/CUDA (nvcc found: CUDA) Release build of the two targets in ./build-pip, tests off;
     FLASHKIT_CMAKE_ARGS adds CMake options (e.g. "-DFLASHKIT_CUDA=OFF").
"""
import os
import re
import shlex
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBRARIES = ("libflashkit_core.so", "libflashkit.so")
TARGETS = ("flashkit_core", "flashkit")


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(flashkit\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("setup.py: no project(flashkit VERSION x.y.z) in CMakeLists.txt")
    return m.group(1)


def run(cmd):
    print("flashkit setup.py: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def native_library_dir():
    given = os.environ.get("FLASHKIT_LIBRARY_DIR")
    if given:
        missing = [n for n in LIBRARIES if not os.path.isfile(os.path.join(given, n))]
        if missing:
            raise RuntimeError("setup.py: FLASHKIT_LIBRARY_DIR=%s lacks %s" % (given, ", ".join(missing)))
        return given
    jobs = ["-j", str(os.cpu_count() or 1)]
    build = os.path.join(ROOT, os.environ.get("FLASHKIT_BUILD_DIR", "build"))
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        build = os.path.join(ROOT, "build-pip")
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        run(["cmake", "-S", ROOT, "-B", build, *generator, "-DCMAKE_BUILD_TYPE=Release", "-DFLASHKIT_BUILD_TESTS=OFF",
             *shlex.split(os.environ.get("FLASHKIT_CMAKE_ARGS", ""))])
    run(["cmake", "--build", build, "--target", *TARGETS, *jobs])
    return os.path.join(build, "lib")


class BuildPyWithLibraries(build_py):
    """build_py, then the native libraries copied next to flashkit/_capi.py."""

    def run(self):
        super().run()
        src = native_library_dir()
        dst = os.path.join(self.build_lib, "flashkit")
        os.makedirs(dst, exist_ok=True)
        for name in LIBRARIES:
            shutil.copy2(os.path.join(src, name), os.path.join(dst, name))


class BinaryDistribution(Distribution):
    """The wheel holds native code: tag it for this platform and Python, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(
    version=cmake_version(),
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithLibraries},
    # setuptools' own scratch space, away from CMake's build/ (whose lib/ holds the libraries).
    options={"build": {"build_base": os.path.join("build-pip", "setuptools")}},
)
