#!/usr/bin/env bash
# Install what gnmr's build, tests and benchmarks need on Debian/Ubuntu.
#
#   bash scripts/install-deps.sh [extra-package ...]
#
# Idempotent: packages already installed are not touched, and apt-get is not
# run at all (not even `update`) when nothing is missing, so it is cheap to
# call from every script. Extra arguments are more Debian package names,
# e.g. clang (MPI is in the default list: the
# `mpi` CTest label runs the sharded reducer test under mpirun).
set -euo pipefail

# libtorch-dev, libopenblas0-pthread (libtorch otherwise gets the ~10x slower
# reference BLAS), fortunes (the training text) and gnuplot-nox (its
# picture) are for gnmr-demo (docs/record/demo.md); gnuplot-nox also draws
# gnmr-replay's plots. clang + libclang-rt-14-dev (libFuzzer and the
# sanitizer runtimes of Debian 12's clang 14) are for scripts/hardening.sh.
# python3-venv, python3-pip and python3-dev let /usr/bin/python3 make the
# Python package's venv (python/, docs/python.md) where no other python3
# can; torch 2.13 itself comes from pip (tests/python/requirements.txt), not
# Debian (whose python3-torch is 1.13, no longer a target).
packages=(build-essential cmake ninja-build catch2 libbenchmark-dev openmpi-bin libopenmpi-dev
  libtorch-dev libopenblas0-pthread fortunes gnuplot-nox clang libclang-rt-14-dev
  python3-dev python3-venv python3-pip "$@")

if ! command -v dpkg >/dev/null 2>&1; then
  echo "install-deps: no dpkg (not Debian/Ubuntu); install these yourself: ${packages[*]}" >&2
  exit 0
fi

# `dpkg -s` alone exits 0 for removed-but-not-purged packages, so check the
# status line too.
is_installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'
}

missing=()
for p in "${packages[@]}"; do
  is_installed "$p" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all present (${packages[*]})"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-deps: missing ${missing[*]}, and not root and no sudo to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
