"""Every Python block of the README and the guides (README.md,
docs/python.md, docs/cuda.md) runs, each in a fresh interpreter from an
empty folder, so a page cannot drift from the code (tests/docs/snippets.py
finds the blocks; the C++ and CUDA ones are built by CTest's docs_snippets
tests). A block whose optional framework is not installed is skipped,
saying which; every other failure fails.
"""
from __future__ import annotations

import os
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


def _machine_env(tmp_path: Path) -> dict:
    """The environment a block runs in. The block itself runs as written;
    only on a CPU with AVX512-FP16 (some Xeons: torch 2.13 sends float8
    GEMMs there to oneDNN's reference kernel, ~300x slower, the same bits
    without it) a sitecustomize turns oneDNN off, as docs/compatibility.md
    tells users to."""
    env = dict(os.environ)
    try:
        fp16 = "avx512_fp16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        fp16 = False
    if fp16:
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text("import torch\ntorch.backends.mkldnn.enabled = False\n")
        env["PYTHONPATH"] = str(site) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_python_block_runs(block, tmp_path):
    if block.directives.get("needs") == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"{block.page}:{block.line} needs a CUDA device")
    src = tmp_path / "snippet.py"
    src.write_text(snippets.python_source(block))
    r = subprocess.run([sys.executable, str(src)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env=_machine_env(tmp_path))
    if r.returncode:
        m = re.search(r"No module named '([^'.]+)", r.stderr)
        if m and m.group(1) in OPTIONAL:
            pytest.skip(f"{block.page}:{block.line}: {m.group(1)} is not installed")
        pytest.fail(f"{block.page}:{block.line} failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
    if block.stdout is not None:
        miss = snippets.stdout_mismatch(block.stdout, r.stdout)
        assert miss is None, (f"{block.page}:{block.line}: the page shows the line {miss!r}, which the block "
                              f"did not print; it printed:\n{r.stdout[-4000:]}")


def test_every_python_block_shows_or_checks_what_it_does():
    """A block the page shows no output for must check its own result (an
    assert) or it proves only that it does not crash."""
    bare = [f"{b.page}:{b.line}" for b in BLOCKS if b.stdout is None and "assert " not in b.code]
    assert not bare, f"these blocks neither show their output nor assert anything: {bare}"
