#!/usr/bin/env bash
# tests/python/run_pytest.sh — build the gnmr Python package into a virtual
# environment with PyTorch 2.13 (the primary target), the way a user installs
# it (docs/python.md, "Install"), and run its pytest suite (tests/python).
# CTest's `python` test runs this; so can you:
#
#   bash tests/python/run_pytest.sh [pytest args...]
#
# 1. the interpreter: the first of $GNMR_PYTHON, python3, /usr/bin/python3
#    that can make a venv with pip (exit 77, CTest's "Skipped", if none);
# 2. the venv ($GNMR_PY_VENV, default python/build/venv, next to pip's
#    in-place build of the package so that every CMake build tree reuses the
#    compiled extension): made anew whenever requirements*.txt change, then
#    `pip install -r requirements.txt` (torch==2.13.0 pinned: an unpinned
#    torch would fetch a CUDA build of several GB) and, unless
#    GNMR_PY_EXTRAS=0, requirements-extras.txt (transformers, accelerate,
#    lightning, torchao: the integrations' tests skip without them);
# 3. `pip install --no-build-isolation ./python` (compiles against that torch);
# 4. pytest over tests/python from outside the source tree.
#
# Environment: GNMR_PYTHON, GNMR_PY_VENV, GNMR_PY_EXTRAS, GNMR_PY_REFERENCE /
# GNMR_REPLAY (the C++ reference tools the decision tests compare with; CTest
# sets them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${GNMR_PY_VENV:-$root/python/build/venv}"
reqs=("$here/requirements.txt")
[ "${GNMR_PY_EXTRAS:-1}" = "0" ] || reqs+=("$here/requirements-extras.txt")

py=""
for cand in "${GNMR_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 || continue
  if "$cand" -c "import venv, ensurepip, sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)" \
      >/dev/null 2>&1; then
    py="$cand"
    break
  fi
done
if [ -z "$py" ]; then
  echo "run_pytest: no python3 >= 3.9 with venv and ensurepip (Debian: python3-venv): skipped"
  exit 77
fi

# The venv is reused while the interpreter and the requirements are the same
# (installing torch and the frameworks is the slow part); the package itself
# is reinstalled every time.
stamp="$("$py" -c 'import sys; print(sys.executable, sys.version)'; cat "${reqs[@]}")"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.gnmr-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "run_pytest: making $venv with $py ($("$py" --version 2>&1))"
  "$py" -m venv --clear "$venv"
  for r in "${reqs[@]}"; do
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$r"
  done
  printf '%s' "$stamp" >"$venv/.gnmr-stamp"
fi
"$venv/bin/python" -c "import torch; print('run_pytest: torch', torch.__version__)"

cd "$root"
"$venv/bin/python" -m pip install --no-build-isolation --no-deps --quiet --disable-pip-version-check ./python
# From outside the source tree: `import gnmr` must find the installed package.
cd "$venv"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs --durations=15 "$root/tests/python" "$@"
