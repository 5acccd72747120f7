#!/usr/bin/env bash
# dsptrain on aarch64 Linux, on any x86-64 Debian machine: an aarch64 Python (Debian's arm64
# packages) run by qemu-user, the Python dependencies as PyPI's aarch64 wheels, and cpu_ops
# built for aarch64 by the project's own setup.py. Nothing is installed system-wide and nothing
# is written into the checkout: all of it lives in the cache below, one folder per input.
#
#   bash scripts/arm64.sh build            make the environment (or find it cached); prints its folder
#   bash scripts/arm64.sh run CMD [ARG...] run CMD with the aarch64 python, pytest and dsptrain first on PATH
#   bash scripts/arm64.sh clean            remove the cache
#
#   e.g. bash scripts/arm64.sh run dsptrain info
#        bash scripts/arm64.sh run pytest -q tests/arm64
#
# Cache: $DSPTRAIN_ARM64_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/dsptrain-arm64:
#   root-KEY/  arm64 .debs unpacked (KEY: the package list and the apt sources)
#   site-KEY/  aarch64 wheels (KEY: the requirement list)
#   ext-KEY/   the built extension (KEY: cpu_ops/, setup.py, pyproject.toml and the two above)
#   env-KEY/   bin/ wrappers and pkg/ (the package: links into runtime/ and ext-KEY) for this checkout
# Needs: qemu-user, g++-aarch64-linux-gnu, apt-get and dpkg-deb, python3 with pip (scripts/setup.sh --tests).
# DSPTRAIN_ARM64_CPU picks QEMU's CPU model (default max: asimddp, i8mm, sve...; cortex-a53 has no dotprod).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${DSPTRAIN_ARM64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dsptrain-arm64}
CPU=${DSPTRAIN_ARM64_CPU:-max}
PYVER=3.11
# What the package and its tests need in the aarch64 Python. The numpy of the x86-64 venv is
# pinned when there is one, so both sides of a comparison run the same NumPy.
DEBS=(python$PYVER libpython$PYVER-dev libstdc++6)
REQUIREMENTS=("PyYAML>=6.0" "tqdm>=4.60" "threadpoolctl>=3.1" "pytest>=8" "pybind11>=2.12" "setuptools>=77" wheel)
HOST_PY=${DSPTRAIN_ARM64_HOST_PYTHON:-}
[ -n "$HOST_PY" ] || { [ -x "$REPO/.venv/bin/python" ] && HOST_PY=$REPO/.venv/bin/python; } || HOST_PY=python3

say() { echo "arm64: $*" >&2; }
die() { echo "arm64: error: $*" >&2; exit 2; }
key() { sha256sum | cut -c1-16; }

need_tools() {
  local missing=()
  for tool in qemu-aarch64 aarch64-linux-gnu-g++ apt-get dpkg-deb flock; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  [ "${#missing[@]}" = 0 ] || die "needs ${missing[*]}: apt-get install qemu-user g++-aarch64-linux-gnu (bash scripts/setup.sh --tests)"
}

numpy_pin() {
  local version
  version=$("$HOST_PY" -c 'import numpy; print(numpy.__version__)' 2>/dev/null) && echo "numpy==$version" || echo "numpy>=2.0"
}

# Debian's arm64 packages and their dependencies, from the machine's own apt sources but with a
# private apt state (arm64 the only architecture, an empty dpkg status), unpacked with dpkg-deb:
# no maintainer scripts run, and the host's dpkg never hears of them.
make_root() {
  local sources k dir
  sources=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$sources" ] || die "no apt sources in /etc/apt to take Debian's arm64 packages from"
  k=$(printf '%s\n' "${DEBS[@]}" "$sources" | key)
  dir=$CACHE/root-$k
  if [ ! -e "$dir/.done" ]; then
    say "fetching Debian arm64 packages: ${DEBS[*]} (and their dependencies)"
    rm -rf "$dir" "$dir.tmp"
    local apt=$dir.tmp/apt
    mkdir -p "$apt"/etc/apt/{apt.conf.d,preferences.d,sources.list.d} "$apt"/var/lib/apt/lists/partial \
             "$apt"/var/cache/apt/archives/partial "$apt"/var/lib/dpkg "$dir.tmp/root"
    : > "$apt/var/lib/dpkg/status"
    cp /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list "$apt/etc/apt/sources.list.d/" 2>/dev/null || true
    [ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$apt/etc/apt/"
    cat > "$apt/apt.conf" <<EOF
Dir "$apt/";
Dir::State::status "$apt/var/lib/dpkg/status";
Dir::Etc::TrustedParts "/etc/apt/trusted.gpg.d/";
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
APT::Install-Recommends "false";
Acquire::Languages "none";
EOF
    APT_CONFIG=$apt/apt.conf apt-get -qq update >&2
    APT_CONFIG=$apt/apt.conf apt-get -qq -y --download-only install "${DEBS[@]}" >/dev/null
    for deb in "$apt"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$dir.tmp/root"; done
    ls "$apt"/var/cache/apt/archives/*.deb | xargs -n1 basename > "$dir.tmp/packages.txt"
    rm -rf "$apt"
    [ -x "$dir.tmp/root/usr/bin/python$PYVER" ] || die "the arm64 packages hold no /usr/bin/python$PYVER"
    touch "$dir.tmp/.done"
    mv "$dir.tmp" "$dir"
  fi
  ROOT=$dir/root
  ROOT_KEY=$k
}

# PyPI's aarch64 wheels (binary only: nothing is compiled for them), installed by the host's pip
# into a folder that the aarch64 Python's pyvenv.cfg environment reads as its site-packages.
make_site() {
  local reqs k dir
  reqs=("$(numpy_pin)" "${REQUIREMENTS[@]}")
  k=$(printf '%s\n' "${reqs[@]}" "$PYVER" | key)
  dir=$CACHE/site-$k
  if [ ! -e "$dir/.done" ]; then
    say "fetching aarch64 wheels: ${reqs[*]}"
    rm -rf "$dir" "$dir.tmp"
    "$HOST_PY" -m pip install -q --disable-pip-version-check --no-warn-script-location --target "$dir.tmp" \
      --only-binary=:all: --implementation cp --python-version "$PYVER" --abi "cp${PYVER/./}" \
      --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 --platform manylinux_2_34_aarch64 \
      "${reqs[@]}" 2> >(grep -Ev "^WARNING: Location|dependency resolver|^[a-z0-9-]+ [0-9.]+ requires .*incompatible" >&2)
    touch "$dir.tmp/.done"
    mv "$dir.tmp" "$dir"
  fi
  SITE=$dir
  SITE_KEY=$k
}

# bin/python runs the aarch64 interpreter under qemu with argv[0] set to itself: Python then
# takes this folder as a virtual environment (pyvenv.cfg) and sys.executable as this wrapper,
# so a test that starts `sys.executable` gets the aarch64 Python again.
make_env() {
  local k
  k=$(printf '%s\n' "$REPO" "$ROOT_KEY" "$SITE_KEY" | key)
  ENV=$CACHE/env-$k
  local lib=$ENV/lib/python$PYVER/site-packages
  mkdir -p "$ENV/bin" "$lib"
  printf 'home = %s\ninclude-system-site-packages = false\nversion = %s\n' "$ROOT/usr/bin" "$PYVER" > "$ENV/pyvenv.cfg"
  cat > "$ENV/bin/python.tmp.$$" <<EOF
#!/bin/sh
# the aarch64 Python of scripts/arm64.sh (Debian's, under qemu-aarch64 -cpu \${DSPTRAIN_ARM64_CPU:-$CPU})
unset PYTHONHOME
export PYTHONPATH="$ENV/pkg:$SITE"
exec qemu-aarch64 -cpu "\${DSPTRAIN_ARM64_CPU:-$CPU}" -L "$ROOT" -0 "$ENV/bin/python" "$ROOT/usr/bin/python$PYVER" "\$@"
EOF
  printf '#!/bin/sh\nexec "%s/bin/python" -m pytest "$@"\n' "$ENV" > "$ENV/bin/pytest.tmp.$$"
  printf '#!/bin/sh\nexec "%s/bin/python" -m dsptrain.cli "$@"\n' "$ENV" > "$ENV/bin/dsptrain.tmp.$$"
  for tool in python pytest dsptrain; do   # replaced in one rename: a starting shell never reads half a file
    chmod +x "$ENV/bin/$tool.tmp.$$"
    mv -f "$ENV/bin/$tool.tmp.$$" "$ENV/bin/$tool"
  done
  ln -sfn python "$ENV/bin/python3"
}

# cpu_ops built by setup.py in the aarch64 Python: its sysconfig names Debian's cross compiler
# (aarch64-linux-gnu-gcc), which qemu-user starts as a native x86-64 process. The arm64 Python
# headers come first; -idirafter lets Debian's multiarch pyconfig.h find its aarch64 half.
make_ext() {
  local k dir
  k=$( (cd "$REPO" && cat setup.py pyproject.toml cpu_ops/* dsp_kernels/*.h 2>/dev/null; echo "$ROOT_KEY $SITE_KEY") | key)
  dir=$CACHE/ext-$k
  if [ ! -e "$dir/.done" ]; then
    say "building cpu_ops for aarch64 (setup.py build_ext in the aarch64 Python)"
    rm -rf "$dir" "$dir.tmp"
    mkdir -p "$dir.tmp"
    local cc=aarch64-linux-gnu-gcc cxx=aarch64-linux-gnu-g++
    if command -v ccache >/dev/null; then cc="ccache $cc"; cxx="ccache $cxx"; fi
    (cd "$REPO" && CC=$cc CXX=$cxx \
      CPPFLAGS="-I$ROOT/usr/include/python$PYVER -idirafter $ROOT/usr/include" \
      DSPTRAIN_BUILD_JOBS=${DSPTRAIN_BUILD_JOBS:-$(nproc)} \
      "$ENV/bin/python" setup.py -q build_ext --build-lib "$dir.tmp/lib" --build-temp "$dir.tmp/tmp" >&2)
    local so
    so=$(ls "$dir.tmp"/lib/dsptrain/_cpu_ops.cpython-*-aarch64-linux-gnu.so) || die "setup.py built no aarch64 _cpu_ops"
    mv "$so" "$dir.tmp/"
    rm -rf "$dir.tmp/lib" "$dir.tmp/tmp"
    touch "$dir.tmp/.done"
    mv "$dir.tmp" "$dir"
  fi
  EXT=$(ls "$dir"/_cpu_ops.*.so)
}

# The package as the editable install lays it out: pkg/dsptrain/ links to each entry of runtime/
# (so config.py still finds configs/ beside it) plus the aarch64 extension. pkg is a link to a
# folder keyed by both, swapped in one rename: a process already running keeps a whole package.
link_package() {
  local k dir
  k=$( (ls "$REPO/runtime"; echo "$EXT") | key)
  dir=$ENV/pkg-$k
  if [ ! -e "$dir" ]; then
    mkdir -p "$dir.tmp.$$/dsptrain"
    for entry in "$REPO"/runtime/*; do
      case "$entry" in *.so|*/__pycache__) continue ;; esac
      ln -s "$entry" "$dir.tmp.$$/dsptrain/"
    done
    ln -s "$EXT" "$dir.tmp.$$/dsptrain/"
    mv -T "$dir.tmp.$$" "$dir" 2>/dev/null || rm -rf "$dir.tmp.$$"   # another caller made it first
  fi
  [ -L "$ENV/pkg" ] || rm -rf "$ENV/pkg"
  ln -sfn "pkg-$k" "$ENV/pkg.tmp.$$"
  mv -T "$ENV/pkg.tmp.$$" "$ENV/pkg"
}

build() {
  need_tools
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  flock 9   # one build at a time per cache; a second caller waits, then finds it done
  make_root
  make_site
  make_env
  make_ext

  link_package
  exec 9>&-
}

case "${1:-}" in
  build)
    build
    echo "$ENV"
    ;;
  run)
    shift
    [ "$#" -gt 0 ] || die "run: give a command, e.g. bash scripts/arm64.sh run dsptrain info"
    build
    PATH="$ENV/bin:$PATH" exec "$@"
    ;;
  clean)
    rm -rf "$CACHE"
    ;;
  *)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
