"""What compiles did, kept for `lumos viz`: inside `with recording() as rec:`, a runtime
that supports it (CpuRuntime) appends one `CompileRecord` per `compile` to `rec.compiles`:
per dim bucket the e-graph's runs (ruleset, round, e-nodes after), the search space's
size, the search's trials and the chosen genome. Outside it nothing is kept."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from lumos.egraph.space import SearchSpace
from lumos.graph import Graph
from lumos.search.genome import Genome


@dataclass
class BucketRecord:
    bucket: dict[str, Any]     # dim -> (min, max, representative); {} for static shapes
    env: dict[str, int]        # the representative dims the search timed at
    saturation: list[Any]      # egraph.schedule.RulesetRun per ruleset run
    space: SearchSpace         # what the search chose from
    genome: Genome             # the chosen e-node per e-class
    trials: list[Any] = field(default_factory=list)  # search.Trial per candidate
    stop_reason: str | None = None
    sizes: list[dict[str, int]] = field(default_factory=list)  # the dims each candidate ran at
    recalled: int = 0          # moves decided by earlier searches' verdicts (search.verdicts)
    learned: int = 0           # verdicts this search reached that none had before


@dataclass
class CompileRecord:
    graph: Graph
    runtime: str
    options: Any                # CompileOptions or None
    buckets: list[BucketRecord]
    loaded: str | None = None   # the artifact file it came from (no saturation, no search)


class Recorder:
    def __init__(self) -> None:
        self.compiles: list[CompileRecord] = []


_CURRENT: ContextVar[Recorder | None] = ContextVar("lumos_recorder", default=None)


@contextmanager
def recording() -> Iterator[Recorder]:
    rec = Recorder()
    token = _CURRENT.set(rec)
    try:
        yield rec
    finally:
        _CURRENT.reset(token)


def current() -> Recorder | None:
    """The active Recorder, or None (then a runtime records nothing)."""
    return _CURRENT.get()


def compiled(graph: Graph, runtime: str, options: Any, buckets: Sequence[Mapping[str, Any]],
             envs: Sequence[Mapping[str, int]], saturated: Sequence[SearchSpace],
             spaces: Sequence[SearchSpace], genomes: Sequence[Genome],
             searches: Sequence[Any], loaded: str | None = None,
             sizes: Sequence[Sequence[Mapping[str, int]]] | None = None) -> None:
    """A runtime's report of one compile (a no-op unless recording): per bucket the space
    as saturated (its `saturation` runs), the space searched, the chosen genome and the
    GeneticSearch (None: not searched)."""
    rec = current()
    if rec is None:
        return
    parts = []
    for i, (b, env, raw, space, genome, search) in enumerate(
            zip(buckets, envs, saturated, spaces, genomes, searches, strict=True)):
        parts.append(BucketRecord({d: tuple(v) for d, v in b.items()}, dict(env),
                                  list(raw.saturation), space, dict(enumerate(genome))
                                  if isinstance(genome, list) else dict(genome),
                                  list(search.history) if search is not None else [],
                                  search.stop_reason if search is not None else None,
                                  [dict(e) for e in sizes[i]] if sizes else [dict(env)],
                                  len(getattr(search, "recalled", ())),
                                  len(search.learned()) if hasattr(search, "learned")
                                  else 0))
    rec.compiles.append(CompileRecord(graph, runtime, options, parts, loaded))
