"""Every example under examples/jax runs (with its own assertions: the
Flax fp8 example checks that the outliers promoted fc1 and that no NaN
reached a weight)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

EXAMPLES = sorted((ROOT / "examples" / "jax").glob("*.py"))


def test_there_are_examples():
    assert EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, tmp_path):
    r = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip()
