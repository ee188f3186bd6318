"""The schedule: which rulesets run to saturation, which a bounded number of times, and
the budgets that stop them.

A `Stage` runs `rounds` times: each `bounded` ruleset once, then the `saturate`
rulesets to a fixpoint. The core stages saturate `expr` and `dtype`, then give
`algebra` a few rounds; a runtime appends its own `Rules` (rule files + stages, e.g.
its `lower_<backend>` rounds) after them (see ReferenceRuntime.rules). Budgets are
checked between runs (one iteration of a bounded ruleset, or a saturating ruleset run to
its fixpoint): the e-node count (`max_enodes`), the rounds of bounded stages
(`max_iterations`) and the seconds since the build started (`time_limit`). Hitting one
is a warning and a smaller space: the stages left are skipped but for the `required`
ones (a backend's lowering), which run unchecked. As one egglog run cannot be
interrupted, the build runs in a child process (lumos.egraph.worker) that is killed at
twice the time limit.

LUMOS_LOG=egglog prints, per ruleset, its runs, matches and time; `Runner.history` keeps
every run (`RulesetRun`: stage, round, iterations, matches, seconds, e-nodes after it) for
`lumos viz`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lumos.egraph.encode import egg, span
from lumos.logs import enabled, log, warn

if TYPE_CHECKING:
    from egglog import bindings as b

RULES_DIR = Path(__file__).parent / "rules"
SATURATION_CAP = 1000  # iterations of a saturating ruleset; more: it never saturates


@dataclass(frozen=True)
class Stage:
    """`rounds` times: run each `bounded` ruleset once, then `saturate` to a fixpoint.
    Rounds stop early once a round changes nothing. A `required` stage (a backend's
    lowering) still runs when saturation hits its time limit (see build_spaces)."""

    saturate: tuple[str, ...] = ()
    bounded: tuple[str, ...] = ()
    rounds: int = 1
    required: bool = False


@dataclass(frozen=True)
class Rules:
    """egglog program texts (sorts, functions, rulesets, facts) and the stages running them."""

    texts: tuple[str, ...]
    stages: tuple[Stage, ...]

    @staticmethod
    def files(*paths: Path | str, stages: tuple[Stage, ...] = ()) -> Rules:
        return Rules(tuple(Path(p).read_text() for p in paths), stages)

    def __add__(self, other: Rules) -> Rules:
        return Rules(self.texts + other.texts, self.stages + other.stages)


ROUNDS = 32  # the most rounds of a bounded stage: fusion's depth (GELU by erf is 31 deep)


@dataclass(frozen=True)
class Budget:
    max_enodes: int = 1_000_000
    max_iterations: int = ROUNDS     # rounds of a bounded stage
    time_limit: float | None = None  # seconds for the whole build (checked between runs)


CORE = Rules.files(*(RULES_DIR / f"{n}.egg" for n in ("terms", "expr", "dtype", "algebra")),
                   stages=(Stage(saturate=("expr", "dtype")),
                           Stage(bounded=("algebra",), saturate=("expr", "dtype"), rounds=4)))


def load(eg: b.EGraph, rules: Rules) -> set[str]:
    """Run the rule texts; returns the names of the constructors they declare."""
    b = egg()
    ctors: set[str] = set()
    for i, text in enumerate(rules.texts):
        cmds = eg.parse_program(text, filename=f"rules{i}")
        for c in cmds:
            if isinstance(c, b.Constructor):
                ctors.add(c.name)
            elif isinstance(c, b.Datatype):
                ctors.update(v.name for v in c.variants)
            elif isinstance(c, b.Datatypes):
                ctors.update(v.name for _, _, sub in c.datatypes
                             if isinstance(sub, b.SubVariants) for v in sub.variants)
        eg.run_program(*cmds)
    return ctors


class BudgetExceeded(Exception):
    pass


@dataclass(frozen=True)
class RulesetRun:
    """One run of a ruleset: in stage `stage` (index in the schedule) and its `round`,
    egglog's iterations and matches, seconds, and the e-nodes after it."""
    ruleset: str
    stage: int
    round: int
    iterations: int
    matches: int
    seconds: float
    enodes: int


class Runner:
    """Runs stages on one e-graph, checking the budget between runs."""

    def __init__(self, eg: b.EGraph, ctors: set[str], budget: Budget,
                 deadline: float | None = None) -> None:
        self.eg, self.ctors, self.budget = eg, ctors, budget
        # (perf_counter) past which the build stops; None: budget.time_limit from now
        self.deadline = deadline if deadline is not None or budget.time_limit is None \
            else time.perf_counter() + budget.time_limit
        self.checked = True  # False while the required stages run after a budget hit
        self.stats: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])  # its, matches, s
        self.history: list[RulesetRun] = []
        # why saturation stopped at its time limit (None: it did not); a space cut short by
        # the clock depends on the machine's load, and is never cached as the searched one
        self.timed_out: str | None = None
        self._at = (0, 0)  # (stage, round) being run

    def enodes(self) -> int:
        (out,) = self.eg.run_program(egg().PrintSize(span(), None))
        return sum(n for f, n in out.sizes if f in self.ctors)

    def run(self, ruleset: str, times: int = 1) -> bool:
        """Run `ruleset` up to `times` iterations (egglog stops early once one changes
        nothing); True if it changed the e-graph. Then check the e-node budget."""
        b = egg()
        sched = b.Run(span(), b.RunConfig(ruleset))
        t = time.perf_counter()
        (out,) = self.eg.run_program(b.RunSchedule(b.Repeat(span(), times, sched)))
        its = out.report.iterations
        s = self.stats[ruleset]
        matches, secs = sum(out.report.num_matches_per_rule.values()), time.perf_counter() - t
        s[0] += len(its)
        s[1] += matches
        s[2] += secs
        n = self.enodes()
        self.history.append(RulesetRun(ruleset, *self._at, len(its), matches, secs, n))
        if not self.checked:
            return out.report.updated
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.timed_out = (f"saturation ran past its time limit of "
                              f"{self.budget.time_limit:g} s after ruleset {ruleset!r}")
            raise BudgetExceeded(self.timed_out)
        if n > self.budget.max_enodes:
            raise BudgetExceeded(f"{n} e-nodes after ruleset {ruleset!r} "
                                 f"(max_enodes={self.budget.max_enodes})")
        if len(its) == times > 1 and its[-1].rule_set_report.changed:
            raise BudgetExceeded(f"ruleset {ruleset!r} did not saturate in {times} iterations")
        return out.report.updated

    def saturate(self, rulesets: tuple[str, ...]) -> bool:
        """Each ruleset to its own fixpoint, in turn, until none changes anything."""
        changed = False
        for _ in range(SATURATION_CAP):
            step = [self.run(rs, SATURATION_CAP) for rs in rulesets]  # all run each time
            if not any(step):
                return changed
            changed = True
        raise BudgetExceeded(f"rulesets {rulesets} did not saturate together")

    def stage(self, st: Stage) -> None:
        rounds = st.rounds if not st.bounded else min(st.rounds, self.budget.max_iterations)
        for r in range(rounds):
            self._at = (self._at[0], r)
            changed = any([self.run(rs) for rs in st.bounded])
            if not self.saturate(st.saturate) and not changed:
                return

    def schedule(self, stages: tuple[Stage, ...]) -> None:
        """All stages; a budget hit is a warning and stops saturation there, but for the
        required stages, which run to the end unchecked (from the one it was in)."""
        k = 0
        try:
            for k, st in enumerate(stages):
                self._at = (k, 0)
                self.stage(st)
        except BudgetExceeded as e:
            warn(f"e-graph budget hit: {e}; saturation stopped, the search space is smaller")
            self.checked = False
            for j in range(k, len(stages)):
                if stages[j].required:
                    self._at = (j, 0)
                    self.stage(stages[j])
        if enabled("egglog"):
            for rs, (its, matches, secs) in self.stats.items():
                log("egglog", f"{rs:>12}: {its:4d} iterations {matches:9d} matches {secs:8.3f}s")
            log("egglog", f"{self.enodes()} e-nodes")
