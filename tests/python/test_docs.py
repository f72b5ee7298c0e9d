"""Every Python block of the README and the guides (README.md,
docs/python.md, docs/cuda.md) runs, each in a fresh interpreter from an
empty folder, so a page cannot drift from the code (tests/docs/snippets.py
finds the blocks; the C++ and CUDA ones are built by CTest's docs_snippets
tests). A block whose optional framework is not installed is skipped,
saying which; every other failure fails.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "docs"))
import snippets  # noqa: E402

BLOCKS = [b for b in snippets.blocks(ROOT) if b.lang == "python"]
OPTIONAL = {"transformers", "accelerate", "lightning", "torchao", "torchtitan"}


def test_the_pages_have_python_blocks():
    pages = {b.page for b in BLOCKS}
    assert {"README.md", "docs/python.md"} <= pages


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_python_block_runs(block, tmp_path):
    if block.directives.get("needs") == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"{block.page}:{block.line} needs a CUDA device")
    src = tmp_path / "snippet.py"
    src.write_text(snippets.python_source(block))
    r = subprocess.run([sys.executable, str(src)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    if r.returncode:
        m = re.search(r"No module named '([^'.]+)", r.stderr)
        if m and m.group(1) in OPTIONAL:
            pytest.skip(f"{block.page}:{block.line}: {m.group(1)} is not installed")
        pytest.fail(f"{block.page}:{block.line} failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
