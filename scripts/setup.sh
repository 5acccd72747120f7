#!/usr/bin/env bash
# Set up dsptrain on Debian 12 (or newer): system packages, a virtual environment in
# .venv, and the package built from this checkout.
#   bash scripts/setup.sh           # what training needs
#   bash scripts/setup.sh --tests   # also the emulated Hexagon DSP (qemu, clang, llvm-readelf for the skel check), the aarch64 cross g++ (NEON tests), the [test] extra: pytest, pytest-xdist, ruff, torch, tensorboardX and TensorBoard's event reader
#                                   # and the aarch64 environment of scripts/arm64.sh (cached; tests/arm64)
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=0
[ "${1:-}" = "--tests" ] && with_tests=1

packages=(python3-venv python3-dev g++ dataset-fashion-mnist)
[ "$with_tests" = 1 ] && packages+=(qemu-user clang-16 lld-16 llvm-16 g++-aarch64-linux-gnu)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# python3-venv/python3-dev are only needed where python3 is Debian's own.
if [ "${#missing[@]}" -gt 0 ]; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
extras=""
[ "$with_tests" = 1 ] && extras="[test]"
.venv/bin/python -m pip install -q -e ".${extras}"
echo "dsptrain installed in .venv ($(.venv/bin/python -c 'import dsptrain; print(dsptrain.__version__)'))"
if [ "$with_tests" = 1 ]; then
  echo "aarch64 environment: $(bash scripts/arm64.sh build)"
fi
