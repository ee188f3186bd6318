"""CompileOptions: the knobs of saturation, search and timing, checked on construction."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lumos.egraph.schedule import ROUNDS

Bucket = tuple[int, int | None, int]  # (min, max or None for unbounded, representative)
MATMUL_PRECISIONS = ("highest", "high")
SEARCHES = ("kernels", "genetic")


@dataclass(frozen=True)
class CompileOptions:
    """How `Graph.compile` searches. Times are in seconds; None means no limit.

    Search: at most `limit` candidates are run (Measured or Invalid; Rejected ones are
    free); `limit=0`: no search, the baseline program (a runtime's unfused one). `search`:
    "kernels" (the default, lumos.search.local.KernelSearch: moves judged by the kernels
    they change) or "genetic" (GeneticSearch). `seeds`: generation 0 starts from the
    runtime's rules of thumb (its seed costs) as well as the baseline; off, from the
    baseline alone. GeneticSearch: `generation_size` candidates per generation, offspring
    copies of the `keep_best` best programs with 1..`mutations` e-classes re-picked; after
    `stagnation` generations without a new best the next generation is fresh random
    genomes; `early_stop_factor` (>= 1): once `2 * stagnation * generation_size` candidates
    in a row have been counted since the last one that ran within `early_stop_factor` times
    the best time, the search stops. KernelSearch stops once `stagnation *
    generation_size` candidates in a row, or a `stagnation`th of `search_time_limit`, kept
    moves worth under 1% of its program's time. `search_time_limit` (60 s) bounds each
    search (one per bucket combination). Same `seed`, same space, same timings: same choice.

    Timing: each candidate is timed `trials` times (the runtime ranks by the median);
    `candidate_timeout` bounds each compiler process of one candidate (a unit's compile,
    the link), `execution_timeout` one execution of it.

    `dim_buckets`: per dynamic dim a list of buckets, each `(min, max, representative)` or
    an object with those attributes (`lumos.egraph.DimBucket`); stored as tuples. One
    saturation and one search per combination of buckets. A key may also be a tuple of
    dims bucketed jointly, each of its buckets one bucket per dim: `{("b", "s"): [((1, 1,
    1), (2, 512, 128)), ((1, 16, 8), (1, 1, 1))]}` compiles those two combinations only
    (a batch of 1 prefilled, up to 16 decoded), not all four.

    E-graph budgets: `max_enodes`, `max_iterations` (of the bounded rulesets),
    `saturation_time_limit`.

    `flush_denormals`: the CPU runtime runs the program with subnormal floats read and
    written as zero (x86's DAZ and FTZ, AArch64's FZ, on every thread it computes on,
    restored after each run), as TensorFlow and XLA do by default and ONNX Runtime offers:
    results then differ from the reference runtime's by less than 2^-126 (1.2e-38) in
    magnitude, and an operation on a subnormal takes no microcode assist (100+ cycles each
    on Intel cores: MobileNetV2's batch norms hold subnormal running means). Off by
    default: every other result is bit for bit the reference's arithmetic. The reference
    runtime ignores it.

    `matmul_precision`: PyTorch's names for how float32 matrix products may round.
    "highest" (the default): in float, as the reference runtime. "high": the CPU runtime
    may also compute a product (the search times both) as each factor split into two
    bfloat16s, x = hi + lo, summing Ahi Bhi + Alo Bhi + Ahi Blo in float on AMX tiles
    where the CPU has them (`torch.set_float32_matmul_precision("high")` allows the same
    "bf16x3" product): relative errors ~4e-6 of a product's magnitude instead of ~4e-7,
    still within the search's float32 check. The reference runtime ignores it.

    `cache`: a runtime that saves artifacts (CpuRuntime) loads the compiled program from
    `$LUMOS_CACHE/artifacts/` (default ~/.cache/lumos) when one was saved for the same
    graph, runtime signature, rules, lumos sources and these options (all but `cache`),
    skipping saturation and search, and saves one after a compile that succeeded. The
    artifact cache is used only when `cache` is True and the environment does not set
    LUMOS_ARTIFACTS=off; `compile(graph, None)` (no search) counts as `cache=True`.
    """

    limit: int = 100
    search: str = "kernels"
    seeds: bool = True
    generation_size: int = 10
    mutations: int = 10
    trials: int = 3
    keep_best: int = 1
    stagnation: int = 3
    candidate_timeout: float | None = 60.0
    execution_timeout: float | None = 10.0
    early_stop_factor: float | None = None
    seed: int = 0
    dim_buckets: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    search_time_limit: float | None = 60.0
    max_enodes: int = 1_000_000
    max_iterations: int = ROUNDS
    # room for a large model to saturate all its buckets on a small machine: at the limit
    # saturation stops (a smaller space: fewer rounds of fusion) and the backend's
    # lowering runs; a build still running at twice the limit is killed and its program
    # compiled without rewrites
    saturation_time_limit: float | None = 120.0
    flush_denormals: bool = False
    matmul_precision: str = "highest"
    cache: bool = True

    def __post_init__(self) -> None:
        _check_int("limit", self.limit, 0)
        for name in ("generation_size", "mutations", "trials", "keep_best",
                     "stagnation", "max_enodes", "max_iterations"):
            _check_int(name, getattr(self, name), 1)
        if self.search not in SEARCHES:
            raise ValueError(f"CompileOptions.search must be one of "
                             f"{', '.join(map(repr, SEARCHES))}, got {self.search!r}")
        _check_int("seed", self.seed, None)
        for name in ("candidate_timeout", "execution_timeout", "search_time_limit",
                     "saturation_time_limit"):
            v = getattr(self, name)
            if v is not None and not (_is_real(v) and v > 0 and not math.isnan(v)):
                raise ValueError(f"CompileOptions.{name} must be a positive number of "
                                 f"seconds or None, got {v!r}")
        f = self.early_stop_factor
        if f is not None and not (_is_real(f) and f >= 1):
            raise ValueError(f"CompileOptions.early_stop_factor must be a number >= 1 or None, "
                             f"got {f!r}")
        for name in ("flush_denormals", "cache", "seeds"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"CompileOptions.{name} must be True or False, "
                                 f"got {getattr(self, name)!r}")
        if self.matmul_precision not in MATMUL_PRECISIONS:
            raise ValueError(f"CompileOptions.matmul_precision must be one of "
                             f"{', '.join(map(repr, MATMUL_PRECISIONS))}, "
                             f"got {self.matmul_precision!r}")
        object.__setattr__(self, "dim_buckets", _check_buckets(self.dim_buckets))


def _is_real(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _check_int(name: str, v: object, lo: int | None) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or (lo is not None and v < lo):
        want = "an int" if lo is None else f"an int >= {lo}"
        raise ValueError(f"CompileOptions.{name} must be {want}, got {v!r}")


def _check_buckets(spec: object) -> dict[str | tuple[str, ...], tuple]:
    if not isinstance(spec, Mapping):
        raise ValueError("CompileOptions.dim_buckets must map dim names to lists of "
                         f"(min, max, representative) buckets, got {spec!r}")
    out: dict[str | tuple[str, ...], tuple] = {}
    seen: set[str] = set()
    for dims, buckets in spec.items():
        where = f"CompileOptions.dim_buckets[{dims!r}]"
        names = (dims,) if isinstance(dims, str) else dims
        if not isinstance(names, tuple) or not names or \
                not all(isinstance(n, str) for n in names):
            raise ValueError(f"{where}: a key is a dim name or a tuple of them")
        if seen & set(names) or len(set(names)) < len(names):
            raise ValueError(f"{where}: dim {sorted(seen & set(names)) or names} is "
                             "bucketed twice")
        seen |= set(names)
        if isinstance(buckets, str | bytes) or not isinstance(buckets, Sequence) or \
                not buckets:
            raise ValueError(f"{where} must be a non-empty list of buckets, got {buckets!r}")
        if isinstance(dims, str):
            norm = sorted((_bucket(b, where) for b in buckets), key=lambda b: b[0])
            for (_, hi, _), (lo, _, _) in zip(norm, norm[1:], strict=False):
                if hi is None or hi >= lo:
                    raise ValueError(f"{where}: buckets overlap: {norm}")
            out[dims] = tuple(norm)
            continue
        joint = []
        for b in buckets:
            if not isinstance(b, Sequence) or len(b) != len(names):
                raise ValueError(f"{where}: a joint bucket is one (min, max, representative) "
                                 f"per dim of {names}, got {b!r}")
            joint.append(tuple(_bucket(x, where) for x in b))
        for i, a in enumerate(joint):
            for c in joint[i + 1:]:
                if all(_meet(x, y) for x, y in zip(a, c, strict=True)):
                    raise ValueError(f"{where}: buckets overlap: {a} and {c}")
        out[names] = tuple(joint)
    return out


def _meet(a: Bucket, b: Bucket) -> bool:
    """Whether two buckets of one dim share a value."""
    return (a[1] is None or b[0] <= a[1]) and (b[1] is None or a[0] <= b[1])


def _bucket(b: Any, where: str) -> Bucket:
    if all(hasattr(b, a) for a in ("min", "max", "representative")):
        t = (b.min, b.max, b.representative)
    elif isinstance(b, Sequence) and len(b) == 3:
        t = tuple(b)
    else:
        raise ValueError(f"{where}: a bucket is (min, max, representative), got {b!r}")
    lo, hi, rep = t
    ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (lo, rep)) and \
        (hi is None or isinstance(hi, int) and not isinstance(hi, bool))
    if not ints or lo < 0 or rep < lo or (hi is not None and hi < rep):
        raise ValueError(f"{where}: bucket {b!r} needs ints 0 <= min <= representative <= max "
                         "(max may be None)")
    return lo, hi, rep
