#!/usr/bin/env bash
# tests/python/run_pytest.sh — build the gnmr Python package into a fresh
# virtual environment, the way a Debian user installs it, and run its pytest
# suite (tests/python). CTest's `python` test runs this; so can you:
#
#   bash tests/python/run_pytest.sh [pytest args...]
#
# The interpreter is the first of $GNMR_PYTHON, /usr/bin/python3, python3
# that imports torch, venv and pytest: on Debian, /usr/bin/python3 sees
# python3-torch, while the python3 first on PATH may be another one (pyenv).
# Exit status 77 (CTest: "Skipped") when there is none.
#
# Environment: GNMR_PYTHON (interpreter), GNMR_PY_VENV (venv directory,
# default python/build/venv: next to pip's in-place build of the package in
# python/build, one per source tree, so that every CMake build tree of it
# reuses the compiled extension instead of rebuilding it for a new venv
# path), GNMR_PY_REFERENCE / GNMR_REPLAY (the C++ reference tools the
# decision tests compare with; CTest sets them).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${GNMR_PY_VENV:-$root/python/build/venv}"

py=""
for cand in "${GNMR_PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 || continue
  if "$cand" -c "import torch, venv, pytest" >/dev/null 2>&1; then
    py="$cand"
    break
  fi
done
if [ -z "$py" ]; then
  echo "run_pytest: no python3 that imports torch, venv and pytest (Debian: python3-torch," \
    "python3-venv, python3-pytest; bash scripts/install-deps.sh installs them): skipped"
  exit 77
fi

# Exactly the documented install: a venv over the system site packages (for
# torch), then pip without build isolation (to compile against that torch)
# and without an index (offline).
"$py" -m venv --clear --system-site-packages "$venv"
cd "$root"
"$venv/bin/python" -m pip install --no-build-isolation --no-index --quiet ./python
# From outside the source tree: `import gnmr` must find the installed package.
cd "$venv"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/python" "$@"
