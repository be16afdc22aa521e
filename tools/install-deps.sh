#!/usr/bin/env bash
# Installs what building and running flashkit need, from Debian 12's packages (run as root or with sudo): the
# compiler and build tools, the libraries libflashkit.so and the CLI link (OpenBLAS, PCRE2, ICU, cpp-httplib for
# `flashkit serve`), the header-only CLI11 and nlohmann-json, and Python 3 with numpy for the Python package.
# The test suite's extra packages (GoogleTest, pytest, torch, matplotlib, clang/libFuzzer, node) are installed by
# tools/install-test-deps.sh, which tools/test.sh runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/apt-install.sh install-deps \
  build-essential cmake ninja-build ccache pkg-config \
  libopenblas-dev libpcre2-dev libicu-dev libcpp-httplib-dev libcli11-dev nlohmann-json3-dev \
  python3 python3-numpy
