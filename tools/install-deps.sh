#!/usr/bin/env bash
# Installs flashkit's build and test dependencies from Debian 12's packages (run as root).
# Skips apt entirely when everything is already present.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build ccache pkg-config
  libopenblas-dev libomp-dev libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev
  python3 python3-numpy python3-pytest python3-torch python3-matplotlib pybind11-dev
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
