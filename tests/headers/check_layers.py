#!/usr/bin/env python3
"""tests/headers/check_layers.py — every #include in include/gnmr goes down.

The folders of include/gnmr are layers (docs/layout.md). A header may
include headers of its own folder and of lower layers, never of a higher
one, and never a folder of the same rank other than its own (the folders of
one rank are independent of each other). A new folder must be given a rank
here, so the check fails on a folder it does not know.

Usage: check_layers.py <include dir>; exit 0 when clean, 1 with one line per
offending include otherwise.
"""
import pathlib
import re
import sys

# Rank of each folder (or root file), lowest first.
RANK = {
    'config.hpp': 0,   # compiler glue and the version
    'core': 1,         # vocabulary and arithmetic: math, dtypes, types, half
    'detail': 2,       # leaf helpers: checks, hashing, formatting, the ring
    'policy': 3,       # the five policy slots and their interface
    'optim': 3,        # the guarded AdamW's public types and arithmetic
    'step': 4,         # the per-step decision core shared by host and device
    'plan': 4,         # chunk plans shared by the host and the device kernels
    'io': 5,           # state blob, telemetry and trace formats
    'host': 6,         # the host backend: controllers, norms, AdamW
    'presets': 7,      # the peers' methods and GNMR by name
    'cuda': 8,         # the CUDA backend
    'comm': 9,         # reducers over ranks: interface, MPI, NCCL
    'gnmr.hpp': 10,    # the umbrella
}
INC = re.compile(r'^\s*#\s*include\s*[<"](gnmr/[^>"]+)[>"]', re.M)


def main():
    root = pathlib.Path(sys.argv[1])
    bad = []
    for p in sorted(root.glob('gnmr/**/*')):
        if p.suffix not in ('.hpp', '.cuh'):
            continue
        rel = p.relative_to(root).as_posix()
        src = rel.split('/')[1]
        if src not in RANK:
            bad.append(f'{rel}: folder {src!r} has no rank in {__file__}')
            continue
        for m in INC.finditer(p.read_text()):
            dst = m.group(1).split('/')[1]
            if dst not in RANK:
                bad.append(f'{rel}: includes {m.group(1)}, whose folder has no rank')
            elif RANK[dst] > RANK[src] or (RANK[dst] == RANK[src] and dst != src):
                bad.append(f'{rel} ({src}, rank {RANK[src]}) includes {m.group(1)} '
                           f'({dst}, rank {RANK[dst]}): includes must go down')
    for b in bad:
        print(b)
    print(f'check_layers: {len(bad)} offending include(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
