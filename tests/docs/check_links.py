#!/usr/bin/env python3
"""tests/docs/check_links.py — the documentation holds together: every
relative link of README.md and docs/**/*.md points at a file that exists
(and, for a #fragment into a Markdown page, at one of its headings), and no
user page (README.md, docs/*.md; not docs/record/) names an issue number.

    python3 tests/docs/check_links.py [ROOT]      exit 0 clean, 1 with one line per problem
"""
from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

LINK = re.compile(r"\]\(([^)\s]+)\)")
ISSUE = re.compile(r"\b[Ii]ssues? \d+\b|\(issue \d+")


@functools.lru_cache(maxsize=None)
def anchors(page: Path):
    out = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            t = line.lstrip("#").strip().lower()
            t = re.sub(r"[^\w\- ]", "", t).replace(" ", "-")
            out.add(t)
    return out


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    pages = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
    bad = []
    for page in pages:
        text = page.read_text()
        in_code = False
        for n, line in enumerate(text.splitlines(), 1):
            if line.startswith("```"):
                in_code = not in_code
                continue
            if in_code:
                continue
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                    continue
                path, _, frag = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                if not dest.exists():
                    bad.append(f"{page.relative_to(root)}:{n}: link to {target}: no such file")
                elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                    bad.append(f"{page.relative_to(root)}:{n}: link to {target}: no such heading")
            user_page = page.parent == root or page.parent == root / "docs"
            if user_page and ISSUE.search(line):
                bad.append(f"{page.relative_to(root)}:{n}: names an issue number (user pages do not)")
    for b in bad:
        print(b)
    print(f"check_links: {len(pages)} pages, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
