"""Every Python block of docs/jax.md runs, each in a fresh interpreter from
an empty folder (the blocks are found by tests/docs/snippets.py's parser,
as the torch suite's test_docs.py finds those of the other pages), so the
page cannot drift from the code. A line `<!-- snippet: prelude=NAME -->`
before a block prepends PRELUDES[NAME] (the model a block's text assumes);
`needs=gpu` blocks are skipped without a GPU.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "docs"))
import snippets  # noqa: E402

PAGE = "docs/jax.md"

PRELUDES = {
    "params": """
import jax, jax.numpy as jnp
params = {"dense": {"kernel": jnp.ones((8, 4)) / 8, "bias": jnp.zeros(4)}, "out": {"kernel": jnp.ones((4, 2)) / 4}}
def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["dense"]["kernel"] + params["dense"]["bias"])
    return jnp.mean((h @ params["out"]["kernel"] - y) ** 2)
batches = [(jnp.full((16, 8), 0.1 * i), jnp.ones((16, 2))) for i in range(1, 6)]
""",
}


def page_blocks():
    old = snippets.PAGES
    snippets.PAGES = (PAGE,)
    try:
        return [b for b in snippets.blocks(ROOT) if b.lang == "python"]
    finally:
        snippets.PAGES = old


BLOCKS = page_blocks()


def test_the_page_has_python_blocks():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_python_block_runs(block, tmp_path):
    if block.directives.get("needs") == "gpu":
        pytest.skip(f"{block.page}:{block.line} needs a GPU")
    pre = block.directives.get("prelude")
    if pre and pre not in PRELUDES:
        pytest.fail(f"{block.page}:{block.line}: unknown prelude {pre!r}")
    src = tmp_path / "snippet.py"
    src.write_text((PRELUDES[pre] if pre else "") + block.code)
    r = subprocess.run([sys.executable, str(src)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    if r.returncode:
        pytest.fail(f"{block.page}:{block.line} failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
