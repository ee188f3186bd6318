"""What evaluating a candidate gives a search: Measured, Rejected or Invalid."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelTime:
    """One kernel of a measured program: `key` names its code (equal keys, equal kernels:
    the same code over the same shapes), `root` the e-class whose buffer it writes,
    `classes` the e-classes whose chosen e-nodes its code computes (root included), and
    `seconds` its time in the run (the runtime's statistic of trials)."""
    key: str
    root: int
    classes: frozenset[int]
    seconds: float


@dataclass(frozen=True)
class Measured:
    """Ran, produced correct outputs, took `seconds` (the runtime's statistic of trials);
    `kernels`: each kernel's time, where the runtime times them (a profile). A run cut
    short (past the search's bound: no `kernels`) may name in `reached` the kernels it
    ran before it stopped, with their times in that run."""
    seconds: float
    kernels: tuple[KernelTime, ...] = ()
    reached: tuple[KernelTime, ...] = ()


@dataclass(frozen=True)
class Rejected:
    """Never ran (compile error, resource cap); does not count toward `limit`."""
    reason: str


@dataclass(frozen=True)
class Invalid:
    """Ran without a usable time (wrong output, timeout, crash); counted, never ranked."""
    reason: str


Outcome = Measured | Rejected | Invalid


@dataclass(frozen=True)
class Trial:
    """One reported candidate: its number (in report order, from 0), generation and
    origin ("seed 0", "baseline", "random", "mutant of 3", "12 moves", "incumbent"),
    outcome ("measured", "invalid" or "rejected"), its seconds (measured only) and the
    best seconds after it (None while nothing is measured)."""
    index: int
    generation: int
    origin: str
    outcome: str
    seconds: float | None
    best: float | None
