#!/usr/bin/env bash
# Installs flashkit's build and test dependencies from Debian 12's packages (run as root).
# Skips apt entirely when everything is already present.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build ccache pkg-config
  libopenblas-dev libomp-dev libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev
  python3 python3-numpy python3-pytest python3-torch libtorch-dev python3-matplotlib python3-jinja2 pybind11-dev
  libpcre2-dev libicu-dev libcpp-httplib-dev
  clang libclang-rt-14-dev  # tests/fuzz (-fsanitize=fuzzer); libFuzzer's runtime is only a Recommends of clang
)
# Node runs the tokenizer's reference comparison (tests/tokenizer/node). A node that is already there (e.g.
# NodeSource's, whose package conflicts with Debian's npm) is used as it is; only without one do we take Debian's.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Reference implementations the tests compare against, pinned by each package-lock.json: Hugging Face's
# JavaScript tokenizers with the real Llama 3.1 / Gemma 3 tokenizer files (tests/tokenizer/node) and its GGUF
# parser (tests/model/node). Offline or without node the tests that need them are skipped, so a failure here is
# not fatal.
root="$(cd "$(dirname "$0")/.." && pwd)"
for node_dir in "$root/tests/tokenizer/node" "$root/tests/model/node"; do
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && [ -f "$node_dir/package-lock.json" ]; then
    if [ -f "$node_dir/node_modules/.package-lock.json" ] && cmp -s "$node_dir/package-lock.json" "$node_dir/.installed-lock"; then
      echo "install-deps: reference packages present in ${node_dir#$root/}"
    elif (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error); then
      cp "$node_dir/package-lock.json" "$node_dir/.installed-lock" 2>/dev/null || true
    else
      echo "install-deps: npm ci in ${node_dir#$root/} failed; the tests that compare against it will be skipped" >&2
    fi
  fi
done
