#!/usr/bin/env python3
"""tests/docs/snippets.py — every code block of the README and the guides
runs, so a page cannot drift from the code.

The pages: README.md, docs/python.md, docs/cuda.md. Their fenced blocks by
language:
  python  run, each in a fresh interpreter (tests/python/test_docs.py)
  cpp     a complete program: compiled with the C++ compiler and run
  cuda    a translation unit: compiled with nvcc (and, where a GPU is
          present and it has a main(), run)
  sh, cmake, text, and blocks without a language: not run (shell commands
          are what scripts/test.sh and the packaging tests run themselves)
A line `<!-- snippet: prelude=NAME -->` right before a block prepends the
prelude NAME (PRELUDES below: the model or data a page's text assumes);
`<!-- snippet: needs=cuda -->` runs a Python block only with a GPU. A
`text` block right after a runnable block, marked `<!-- snippet: stdout -->`,
is what the page says the program prints: each of its lines must be a line
of the program's output, in that order (other lines may come between;
`...` inside a line matches anything), so a snippet that stopped doing
what its page shows fails, not only one that crashes. A block is run as
written: nothing is added to it but its declared prelude.

    python3 tests/docs/snippets.py list
    python3 tests/docs/snippets.py cpp  --cxx g++  --root . --out DIR
    python3 tests/docs/snippets.py cuda --nvcc nvcc --root . --out DIR
Exit 0 when every block of that language built (and ran), 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

PAGES = ("README.md", "docs/python.md", "docs/cuda.md")
RUN = {"python", "cpp", "cuda"}
QUIET = {"sh", "cmake", "text", ""}

# What the pages' text assumes when a block starts in the middle of a
# training script. Tiny on purpose: every block runs in CI on a CPU.
PRELUDES: Dict[str, str] = {
    "model": """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
loader = [(torch.randn(16, 32), torch.randn(16, 32)) for _ in range(8)]
loss_fn = torch.nn.functional.mse_loss
""",
}


class Block(NamedTuple):
    page: str
    line: int
    lang: str
    code: str
    directives: Dict[str, str]
    stdout: Optional[str] = None  # the output the page shows for it, if any

    @property
    def name(self) -> str:
        return f"{self.page.replace('/', '_').replace('.md', '')}_L{self.line}"


_FENCE = re.compile(r"^```([A-Za-z+]*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")


def blocks(root: Path) -> List[Block]:
    out = []
    for page in PAGES:
        lines = (root / page).read_text().splitlines()
        i = 0
        while i < len(lines):
            m = _FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            lang, start = m.group(1).lower(), i + 1
            d = _DIRECTIVE.match(lines[i - 1]) if i > 0 else None
            directives = dict(kv.split("=", 1) if "=" in kv else (kv, "") for kv in d.group(1).split()) if d else {}
            j = start
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j == len(lines):
                raise SystemExit(f"{page}:{i + 1}: unclosed code block")
            if lang not in RUN | QUIET:
                raise SystemExit(f"{page}:{i + 1}: block language {lang!r}: use one of {sorted(RUN | QUIET)}")
            code = "\n".join(lines[start:j]) + "\n"
            if "stdout" in directives or (d and d.group(1).strip() == "stdout"):
                if lang != "text" or not out or out[-1].lang not in RUN or out[-1].stdout is not None:
                    raise SystemExit(f"{page}:{i + 1}: a stdout block is a text block right after a runnable one")
                out[-1] = out[-1]._replace(stdout=code)
            else:
                out.append(Block(page, i + 1, lang, code, directives))
            i = j + 1
    return out


def stdout_mismatch(expected: str, actual: str) -> Optional[str]:
    """None when every expected line is an output line, in order (`...`
    inside a line matches anything); else the first line not found."""
    got = actual.splitlines()
    k = 0
    for want in expected.splitlines():
        if not want.strip():
            continue
        pat = re.compile("^" + ".*".join(re.escape(part) for part in want.rstrip().split("...")) + r"\s*$")
        while k < len(got) and not pat.match(got[k]):
            k += 1
        if k == len(got):
            return want
        k += 1
    return None


def python_source(b: Block) -> str:
    """The program a Python block runs as: its declared prelude, then the
    block as written."""
    pre = b.directives.get("prelude")
    if pre and pre not in PRELUDES:
        raise SystemExit(f"{b.page}:{b.line}: unknown prelude {pre!r}")
    return (PRELUDES[pre] if pre else "") + b.code


def build(kind: str, root: Path, out: Path, tool: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    bad = 0
    todo = [b for b in blocks(root) if b.lang == kind]
    for b in todo:
        src = out / (b.name + (".cpp" if kind == "cpp" else ".cu"))
        src.write_text(b.code)
        exe = out / b.name
        inc = ["-I", str(root / "include")]
        if kind == "cpp":
            cmd = [tool, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", *inc, str(src),
                   "-o", str(exe), "-pthread"]
        else:
            has_main = re.search(r"\bint\s+main\s*\(", b.code) is not None
            cmd = [tool, "-std=c++17", "-arch=sm_90", "--Werror=all-warnings", "-Xcompiler=-Wall,-Wextra,-Werror",
                   *inc, str(src)] + (["-o", str(exe)] if has_main else ["-c", "-o", str(exe) + ".o"])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            print(f"FAILED to build {b.page}:{b.line}\n{r.stdout}{r.stderr}")
            bad += 1
            continue
        if kind == "cpp" or (kind == "cuda" and has_main and os.environ.get("GNMR_DOCS_RUN_CUDA") == "1"):
            r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
            if r.returncode:
                print(f"FAILED to run {b.page}:{b.line} (exit {r.returncode})\n{r.stdout}{r.stderr}")
                bad += 1
                continue
            miss = stdout_mismatch(b.stdout, r.stdout) if b.stdout is not None else None
            if miss is not None:
                print(f"FAILED {b.page}:{b.line}: the page shows the line\n  {miss}\nwhich the program did not "
                      f"print; it printed:\n{r.stdout}")
                bad += 1
                continue
        print(f"ok {b.page}:{b.line} ({kind})")
    print(f"snippets: {len(todo)} {kind} blocks, {bad} failed")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["list", "cpp", "cuda"])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]))
    ap.add_argument("--out", default="build/docs-snippets")
    ap.add_argument("--cxx", default="g++")
    ap.add_argument("--nvcc", default="nvcc")
    a = ap.parse_args()
    root = Path(a.root)
    if a.kind == "list":
        for b in blocks(root):
            print(f"{b.page}:{b.line} {b.lang or '-'} {'run' if b.lang in RUN else 'not run'} {b.directives or ''}")
        return 0
    return build(a.kind, root, Path(a.out), a.cxx if a.kind == "cpp" else a.nvcc)


if __name__ == "__main__":
    sys.exit(main())
