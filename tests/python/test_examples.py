"""The integration examples under examples/python run as documented (a few
steps each): they are the exact code docs/python.md shows. Each skips
without its framework."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

TEXT = "/usr/share/games/fortunes"

CASES = [
    ("hf_trainer.py", "transformers", ["--steps", "12", "--spike-at", "8", "--text", TEXT], "controller steps: 12"),
    ("lightning_fit.py", "lightning", ["--steps", "12", "--spike-at", "8", "--text", TEXT], "controller steps 12"),
    ("torchao_float8.py", "torchao", ["--steps", "30", "--spike-at", "20"], "high precision: ['2']"),
    ("fsdp2_tp.py", "torch.distributed.fsdp", ["--spawn", "4", "--steps", "30", "--spike-at", "20"],
     "mesh (2, 2) (dp, tp): controller steps 30"),
]
# Where each example writes (none for torchao_float8.py).
OUT_FLAG = {"hf_trainer.py": "--out", "lightning_fit.py": "--out", "fsdp2_tp.py": "--ckpt"}


@pytest.mark.parametrize("script,module,args,expect", CASES, ids=[c[0] for c in CASES])
def test_example_runs(tmp_path, script, module, args, expect):
    pytest.importorskip(module)
    if TEXT in args and not os.path.isdir(TEXT):
        pytest.skip(f"no {TEXT} (Debian: fortunes)")
    if script in OUT_FLAG:
        args = args + [OUT_FLAG[script], str(tmp_path / "out")]
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / script)] + args,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert expect in r.stdout, r.stdout[-3000:]
