"""Units over a pytree: which leaves make up each recoverable unit, and each
unit's sum of squares inside a traced program.

A leaf is named by its key path, "/"-joined (jax.tree_util.keystr with
simple=True): a Flax parameter tree's kernel is "params/Dense_0/kernel".
Units are, by the guard's `units` argument:
  None                  one unit per leaf, named by its path;
  {name: pattern, ...}  each leaf joins the first unit (in the mapping's
                        order) one of whose patterns matches its path
                        (fnmatch: "*" also crosses "/"; a pattern may be a
                        str, a list of str, or a callable path -> bool);
  callable(path) -> name  the unit of each leaf, units in order of first use.
A global preset (clip, zclip, skip-step) has one unit, "global", over every
leaf, as in the torch package.
"""
from __future__ import annotations

import fnmatch
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import jax
import jax.numpy as jnp

Units = Union[None, Mapping[str, Any], Callable[[str], str]]


class Layout(NamedTuple):
    names: Tuple[str, ...]       # one per unit
    leaf_unit: Tuple[int, ...]   # per leaf, in tree_flatten order: its unit
    paths: Tuple[str, ...]       # per leaf: its path
    treedef: Any


def leaf_paths(tree: Any) -> Tuple[List[str], List[Any], Any]:
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    paths = [jax.tree_util.keystr(p, simple=True, separator="/") for p, _ in flat]
    return paths, [x for _, x in flat], treedef


def _matcher(name: str, pattern: Any) -> Callable[[str], bool]:
    if callable(pattern):
        return lambda p: bool(pattern(p))
    pats = [pattern] if isinstance(pattern, str) else list(pattern)
    if not pats or not all(isinstance(q, str) for q in pats):
        raise TypeError(f"gnmr_jax: unit '{name}': a pattern is a str, a list of str or a callable")
    return lambda p: any(fnmatch.fnmatchcase(p, q) for q in pats)


def resolve(tree: Any, units: Units, collapse: bool) -> Layout:
    """The layout of `tree` (parameters or gradients). ValueError for a tree
    without leaves, a leaf no unit claims, a unit that claims none, or
    duplicate names; TypeError for a leaf that is not a floating array."""
    paths, leaves, treedef = leaf_paths(tree)
    if not leaves:
        raise ValueError("gnmr_jax: the tree has no array leaves")
    for p, x in zip(paths, leaves):
        dt = getattr(x, "dtype", None)
        if dt is None or not jnp.issubdtype(dt, jnp.floating):
            raise TypeError(f"gnmr_jax: leaf '{p or '<root>'}' is {dt if dt is not None else type(x).__name__}: "
                            "a guarded tree holds floating-point arrays only (float32, bfloat16, float16, float8)")
    if collapse:
        return Layout(("global",), (0,) * len(leaves), tuple(paths), treedef)
    if units is None:
        if len(set(paths)) != len(paths):
            raise ValueError("gnmr_jax: two leaves have the same path; name the units explicitly")
        return Layout(tuple(p or "<root>" for p in paths), tuple(range(len(leaves))), tuple(paths), treedef)
    if isinstance(units, Mapping):
        names = list(units)
        if not names:
            raise ValueError("gnmr_jax: units is an empty mapping")
        for n in names:
            if not isinstance(n, str) or not n:
                raise TypeError(f"gnmr_jax: a unit name must be a non-empty str, got {n!r}")
        match = [_matcher(n, units[n]) for n in names]
        leaf_unit: List[int] = []
        loose = []
        for p in paths:
            u = next((i for i, m in enumerate(match) if m(p)), None)
            if u is None:
                loose.append(p)
            leaf_unit.append(-1 if u is None else u)
        if loose:
            raise ValueError(f"gnmr_jax: {len(loose)} leaves belong to no unit: {', '.join(loose[:8])}"
                             f"{' ...' if len(loose) > 8 else ''} (add a pattern, or a catch-all unit '*' last)")
        empty = [n for i, n in enumerate(names) if i not in leaf_unit]
        if empty:
            raise ValueError(f"gnmr_jax: units with no leaf: {', '.join(empty)} (paths look like "
                             f"'{paths[0]}')")
        return Layout(tuple(names), tuple(leaf_unit), tuple(paths), treedef)
    if callable(units):
        names, leaf_unit = [], []
        for p in paths:
            n = units(p)
            if not isinstance(n, str) or not n:
                raise TypeError(f"gnmr_jax: units({p!r}) must return a non-empty str, got {n!r}")
            if n not in names:
                names.append(n)
            leaf_unit.append(names.index(n))
        return Layout(tuple(names), tuple(leaf_unit), tuple(paths), treedef)
    raise TypeError(f"gnmr_jax: units must be None, a mapping name -> pattern or a callable, "
                    f"got {type(units).__name__}")


def check_tree(layout: Layout, tree: Any, what: str) -> List[Any]:
    """The leaves of `tree`, which must have the layout's structure."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if treedef != layout.treedef:
        raise ValueError(f"gnmr_jax: the {what} tree does not match the tree the guard was initialised "
                         f"with ({treedef.num_leaves} leaves vs {layout.treedef.num_leaves}): "
                         f"{treedef} vs {layout.treedef}")
    return leaves


def leaf_axes(layout: Layout, axis_name: Any, param_specs: Any) -> List[Tuple[str, ...]]:
    """Per leaf, the mesh axes its partial is summed over (shard_map):
    axis_name for every leaf, or the axes named in its PartitionSpec."""
    if param_specs is None:
        if axis_name is None:
            return [()] * len(layout.paths)
        axes = (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)
        return [axes] * len(layout.paths)
    if axis_name is not None:
        raise ValueError("gnmr_jax: give axis_name or param_specs, not both")
    specs = jax.tree_util.tree_leaves(param_specs, is_leaf=lambda x: x is None or isinstance(
        x, jax.sharding.PartitionSpec))
    if len(specs) != len(layout.paths):
        raise ValueError(f"gnmr_jax: param_specs has {len(specs)} entries for {len(layout.paths)} leaves")
    out = []
    for s in specs:
        axes: List[str] = []
        for entry in (s or ()):
            for a in ((entry,) if isinstance(entry, str) else (entry or ())):
                if a not in axes:
                    axes.append(a)
        out.append(tuple(axes))
    return out


def unit_partials(layout: Layout, leaves: Sequence[Any], axes: Sequence[Tuple[str, ...]]) -> jax.Array:
    """float32[N]: each unit's sum of squares, in float32. Per leaf XLA's
    reduction (its order is XLA's: fixed for one compiled program); within
    a unit the leaves are added in tree order. Leaves sharded over mesh axes
    inside shard_map are summed over those axes first (one psum per distinct
    set of axes), so that every device has the global sums."""
    n = len(layout.names)
    groups: Dict[Tuple[str, ...], List[List[jax.Array]]] = {}
    for leaf, u, ax in zip(leaves, layout.leaf_unit, axes):
        x = jnp.asarray(leaf)
        s = jnp.sum(jnp.square(x.astype(jnp.float32))) if x.size else jnp.zeros((), jnp.float32)
        groups.setdefault(ax, [[] for _ in range(n)])[u].append(s)
    total: Optional[jax.Array] = None
    for ax in sorted(groups):
        per_unit = []
        for parts in groups[ax]:
            acc = jnp.zeros((), jnp.float32)
            for s in parts:
                acc = acc + s
            per_unit.append(acc)
        vec = jnp.stack(per_unit)
        if ax:
            vec = jax.lax.psum(vec, ax)
        total = vec if total is None else total + vec
    assert total is not None
    return total
