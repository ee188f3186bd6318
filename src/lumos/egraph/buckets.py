"""Dimension buckets: one saturated e-graph (and one search) per combination of buckets
of the dynamic dims; `execute` dispatches on the actual dims.

A dim given no buckets has one, its declared range, represented by its upper end (a
search at the smallest size alone chooses kernels for work that hardly exists), an
unbounded one by its minimum. `fits` may lower those default sizes (halving towards the
minimum) until the graph's values at them fit in memory."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from lumos.errors import BindError


class DimBucket(NamedTuple):
    """Values min..max (inclusive; max None: unbounded) of one dim; search times the
    program at `representative`."""

    min: int
    max: int | None
    representative: int


Combo = dict[str, DimBucket]


def _min(b: DimBucket) -> int:
    return b.min


def _fmt(b: DimBucket) -> str:
    return f"[{b.min}, {'inf' if b.max is None else b.max}]"


def combos(dims: Mapping[str, tuple[int, int | None]],
           buckets: Mapping[str | tuple[str, ...], Sequence[Sequence]],
           fits: Callable[[Mapping[str, int]], bool] | None = None) -> list[Combo]:
    """Every combination of buckets, one per dim of `dims` (a dim without buckets has one:
    its declared range, represented by its upper end or, unbounded, its minimum; lowered
    while `fits` says the dims do not fit), clipped to the declared ranges; dims keyed
    together (a tuple) take their buckets jointly. Rejects unknown dims, buckets outside
    the range and overlapping buckets."""
    named = {n for k in buckets for n in ((k,) if isinstance(k, str) else k)}
    unknown = named - set(dims)
    if unknown:
        raise ValueError(f"dim_buckets name unknown dims {sorted(unknown)}; the graph has "
                         f"{sorted(dims)}")
    groups: list[tuple[tuple[str, ...], list[tuple]]] = \
        [((k,), [(b,) for b in v]) if isinstance(k, str) else (k, list(v))
         for k, v in buckets.items()]
    default = [n for n in dims if n not in named]
    groups += [((n,), [((lo, hi, lo if hi is None else hi),)])
               for n, (lo, hi) in ((n, dims[n]) for n in default)]
    per_group = []
    for names, joint in sorted(groups):
        if len(names) == 1:
            given = sorted((DimBucket(*b[0]) for b in joint), key=_min)
            for a, c in itertools.pairwise(given):
                if a.max is None or a.max >= c.min:
                    raise ValueError(f"dim {names[0]!r}: buckets {_fmt(a)} and {_fmt(c)} "
                                     "overlap")
            joint = [(b,) for b in given]
        per_group.append([tuple((n, _clip(n, dims[n], DimBucket(*b)))
                                for n, b in zip(names, row, strict=True)) for row in joint])
    out = [dict(sorted(x for part in c for x in part)) for c in itertools.product(*per_group)]
    return out if fits is None else [_fitted(c, default, fits) for c in out]


def _fitted(combo: Combo, default: Sequence[str], fits: Callable[[Mapping[str, int]], bool]
            ) -> Combo:
    """`combo` with the representatives of its `default` dims halved towards their
    minimum until `fits` holds (or they are all at it)."""
    combo = dict(combo)
    while not fits({n: b.representative for n, b in combo.items()}):
        lower = {n: combo[n]._replace(representative=(combo[n].min + combo[n].representative)
                                      // 2)
                 for n in default if combo[n].representative > combo[n].min}
        if not lower:
            break
        combo.update(lower)
    return combo


def _clip(name: str, declared: tuple[int, int | None], bk: DimBucket) -> DimBucket:
    lo, hi = declared
    top = bk.max if hi is None else hi if bk.max is None else min(bk.max, hi)
    if top is not None and max(bk.min, lo) > top:
        raise ValueError(f"dim {name!r}: bucket {_fmt(bk)} is outside its declared "
                         f"range {_fmt(DimBucket(lo, hi, lo))}")
    return DimBucket(max(bk.min, lo), top, bk.representative)


def bounds(combo: Combo) -> dict[str, tuple[int, int | None]]:
    return {name: (bk.min, bk.max) for name, bk in combo.items()}


def _holds(b: DimBucket, v: int) -> bool:
    return b.min <= v and (b.max is None or v <= b.max)


def select(all_combos: Sequence[Combo], env: Mapping[str, int]) -> int:
    """Index of the combination holding the actual dims; BindError naming the dim if none."""
    for name in all_combos[0]:
        mine = sorted({c[name] for c in all_combos}, key=_min)
        if not any(_holds(b, env[name]) for b in mine):
            raise BindError(f"execute: dimension {name!r}={env[name]} is in none of its "
                            f"buckets {', '.join(map(_fmt, mine))}")
    hit = next((i for i, c in enumerate(all_combos)
                if all(_holds(b, env[n]) for n, b in c.items())), None)
    if hit is None:  # (dims bucketed jointly: each value in a bucket, not together)
        names = ", ".join(f"{n}={env[n]}" for n in all_combos[0])
        raise BindError(f"execute: dimensions {names} are in no bucket combination: "
                        + "; ".join(", ".join(f"{n} {_fmt(b)}" for n, b in c.items())
                                    for c in all_combos))
    return hit
