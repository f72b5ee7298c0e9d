"""python/gnmr grows by rooms: a module per integration, and no import
circles. Every import between the package's modules (at the top of a file
or inside a function, relative or absolute) is an edge; the graph must be
acyclic, so each module can be read knowing only those below it.
"""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "python" / "gnmr"


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _edges():
    mods = {_module(p): p for p in PKG.rglob("*.py")}
    edges = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t in mods and t != m and not (p.name == "__init__.py" and t.startswith(m + ".")):
                    edges[m].add(t)
    return edges


def test_no_import_circles_inside_the_package():
    edges = _edges()
    assert "gnmr.controller" in edges and "gnmr.optim" in edges
    assert "gnmr.controller" in edges["gnmr.optim"]  # the direction imports go
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(edges[m]):
            if state.get(t) == "open":
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
