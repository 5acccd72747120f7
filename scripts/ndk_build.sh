#!/usr/bin/env bash
# Cross-builds dsptrain's CPU kernels (cpu_ops/) for an Android phone with the Android NDK:
# dsptrain/_cpu_ops.so for arm64-v8a, to copy into the package on the phone (next to
# runtime/__init__.py). The flags are setup.py's own (read from it), so the phone runs the
# kernels built as on any aarch64 machine: ARMv8.0 code with the NEON dot-product GEMM in
# its own target attribute, picked at run time from HWCAP (cpu_ops/cpu_features.cpp).
#
#   ANDROID_NDK_HOME=/path/to/ndk PYTHON_INCLUDE=/path/to/include/python3.11 \
#   PYTHON_LIB=/path/to/libpython3.11.so bash scripts/ndk_build.sh [OUT_DIR]
#
#   ANDROID_NDK_HOME (or ANDROID_NDK_ROOT)  an NDK r23 or newer (its LLVM toolchain)
#   PYTHON_INCLUDE   the phone's Python headers (Termux: $PREFIX/include/python3.11, copied over)
#   PYTHON_LIB       its libpython (Android's linker wants extension modules linked against it)
#   ANDROID_API      the minimum API level (default 24, what Termux targets)
#   NDK_CXX          a compiler command to use instead of the NDK's (for checking this script
#                    without an NDK, e.g. "clang++-16 --target=aarch64-linux-gnu"); with it,
#                    PYTHON_LIB may be left out
#   bash scripts/ndk_build.sh --print-flags   the compile flags, and nothing else
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "ndk_build: error: $*" >&2; exit 2; }

# setup.py's flags list for the extension, so the two builds cannot drift apart
setup_flags() {
  python3 - "$REPO/setup.py" <<'EOF'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "cpu_ops_extension")
flags = next(n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
             and getattr(n.targets[0], "id", "") == "flags")
print(" ".join(ast.literal_eval(flags)))
EOF
}

API=${ANDROID_API:-24}
# -fvisibility=hidden and -std=c++17 are what Pybind11Extension adds; -static-libstdc++ keeps
# libc++_shared.so off the phone
FLAGS="$(setup_flags) -std=c++17 -fPIC -fvisibility=hidden"
LINK="-shared -pthread -static-libstdc++"
if [ "${1:-}" = "--print-flags" ]; then echo "$FLAGS"; exit 0; fi

OUT=${1:-$REPO/build/android-arm64}
if [ -n "${NDK_CXX:-}" ]; then
  read -r -a CXX <<<"$NDK_CXX"
else
  NDK=${ANDROID_NDK_HOME:-${ANDROID_NDK_ROOT:-}}
  [ -n "$NDK" ] || die "no Android NDK: set ANDROID_NDK_HOME to one (r23 or newer); none is installed by scripts/setup.sh"
  bin=$NDK/toolchains/llvm/prebuilt/linux-x86_64/bin
  [ -x "$bin/aarch64-linux-android$API-clang++" ] || die "ANDROID_NDK_HOME=$NDK has no $bin/aarch64-linux-android$API-clang++"
  CXX=("$bin/aarch64-linux-android$API-clang++")
  [ -n "${PYTHON_LIB:-}" ] || die "set PYTHON_LIB to the phone's libpython3.x.so"
fi
[ -n "${PYTHON_INCLUDE:-}" ] && [ -f "$PYTHON_INCLUDE/Python.h" ] || die "set PYTHON_INCLUDE to a folder with the phone's Python.h"
PYBIND11_INCLUDE=${PYBIND11_INCLUDE:-$(python3 -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null)} \
  || die "pybind11 not found: pip install pybind11, or set PYBIND11_INCLUDE"

mkdir -p "$OUT/obj" "$OUT/dsptrain"
objs=()
for src in "$REPO"/cpu_ops/*.cpp; do
  obj=$OUT/obj/$(basename "${src%.cpp}").o
  objs+=("$obj")
  echo "${CXX[*]} $FLAGS -c $src" >&2
  # shellcheck disable=SC2086
  "${CXX[@]}" $FLAGS -I "$REPO/cpu_ops" -I "$REPO/dsp_kernels" -I "$PYBIND11_INCLUDE" -I "$PYTHON_INCLUDE" \
    ${PYTHON_EXTRA_INCLUDE:+-idirafter "$PYTHON_EXTRA_INCLUDE"} -c "$src" -o "$obj" &
  # two compiles at a time (or DSPTRAIN_BUILD_JOBS)
  while [ "$(jobs -rp | wc -l)" -ge "${DSPTRAIN_BUILD_JOBS:-2}" ]; do wait -n; done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n; done
# shellcheck disable=SC2086
"${CXX[@]}" $LINK "${objs[@]}" ${PYTHON_LIB:+"$PYTHON_LIB"} -o "$OUT/dsptrain/_cpu_ops.so"
echo "$OUT/dsptrain/_cpu_ops.so"
