#!/usr/bin/env bash
# tests/jax/run_pytest.sh — build the gnmr_jax package (python-jax/) into a
# virtual environment with jax, jaxlib, optax, orbax-checkpoint and flax
# from PyPI and no torch, the way docs/jax.md says to install it, and run
# its pytest suite (tests/jax). CTest's `jax` test runs this; so can you:
#
#   bash tests/jax/run_pytest.sh [pytest args...]
#
# 1. the interpreter: the first of $GNMR_PYTHON, python3, /usr/bin/python3
#    that can make a venv with pip (exit 77, CTest's "Skipped", if none);
# 2. the venv ($GNMR_JAX_VENV, default python-jax/build/venv): made anew
#    whenever requirements.txt or the interpreter change;
# 3. `pip install --no-build-isolation ./python-jax` (compiles the FFI
#    handlers against that jaxlib's headers);
# 4. gnmr_jax_reference (tests/jax/reference.cpp), the C++ controller the
#    decisions are compared with: CTest passes its build as
#    $GNMR_JAX_REFERENCE; otherwise it is compiled here with $CXX (default
#    g++) into python-jax/build/, again when a header is newer;
# 5. pytest over tests/jax from outside the source tree.
#
# Environment: GNMR_PYTHON, GNMR_JAX_VENV, CXX, GNMR_JAX_REFERENCE,
# GNMR_PY_REFERENCE, GNMR_REPLAY and GNMR_GEN_TRACE (the C++ tools the
# decisions are also compared with when built; CTest sets them),
# GNMR_JAX_CUDA_CHECK=0 (no nvcc build of the CUDA handler).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${GNMR_JAX_VENV:-$root/python-jax/build/venv}"
reqs="$here/requirements.txt"

py=""
for cand in "${GNMR_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 || continue
  if "$cand" -c "import venv, ensurepip, sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)" \
      >/dev/null 2>&1; then
    py="$cand"
    break
  fi
done
if [ -z "$py" ]; then
  echo "run_pytest (jax): no python3 >= 3.10 with venv and ensurepip (Debian: python3-venv): skipped"
  exit 77
fi

stamp="$("$py" -c 'import sys; print(sys.executable, sys.version)'; cat "$reqs")"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.gnmr-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "run_pytest (jax): making $venv with $py ($("$py" --version 2>&1))"
  "$py" -m venv --clear "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
  printf '%s' "$stamp" >"$venv/.gnmr-stamp"
fi
"$venv/bin/python" -c "import jax, optax; print('run_pytest (jax): jax', jax.__version__, 'optax', optax.__version__)"

cd "$root"
"$venv/bin/python" -m pip install --no-build-isolation --no-deps --quiet --disable-pip-version-check ./python-jax

if [ -z "${GNMR_JAX_REFERENCE:-}" ]; then
  ref="$root/python-jax/build/gnmr_jax_reference"
  if [ ! -x "$ref" ] || [ -n "$(find "$root/include" "$here/reference.cpp" -newer "$ref" -print -quit)" ]; then
    echo "run_pytest (jax): compiling $ref"
    mkdir -p "$(dirname "$ref")"
    ${CXX:-g++} -std=c++17 -O2 -ffp-contract=off -I"$root/include" "$here/reference.cpp" -o "$ref"
  fi
  export GNMR_JAX_REFERENCE="$ref"
fi

# From outside the source tree: `import gnmr_jax` must find the installed package.
cd "$venv"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs --durations=10 "$here" "$@"
