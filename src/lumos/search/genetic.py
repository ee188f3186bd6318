"""GeneticSearch: a pull-style genetic search over a SearchSpace.

    search = GeneticSearch(space, options)
    while (genome := search.next_candidate()) is not None:
        search.report(genome, evaluate(genome))   # Measured / Rejected / Invalid
    genome, seconds = search.best()

(`search.run(evaluate)` is that loop.) Candidates of one generation may be taken ahead
and reported in any order; asking beyond the generation, or beyond `limit`, while some
are unreported raises RuntimeError.

Generation 0 is one genome per seed cost (a backend's rules of thumb, see
Genomes.preferring), then the baseline genome (the original program), then random
genomes: a search of `limit` = the number of seeds times just the seeds (an unfused
baseline of a model can take seconds a run, e.g. a logits matmul materialized as a
broadcast product); later
generations are mutants of the `keep_best` best, or fresh random genomes after
`stagnation` generations without a new best, or when nothing has been measured yet
(e.g. a generation that was all Rejected). Every genome and every extracted program is
handed out at most once. The search ends at `limit` counted candidates, at
`search_time_limit`, on early stop (see CompileOptions), when no new program turns up
in `EXHAUSTED_AFTER` tries per slot, or after `MAX_REJECTED_GENERATIONS` generations in
a row with nothing but Rejected candidates. `stop_reason` says which.

`history` holds one `Trial` per reported candidate (where it came from, its outcome, the
best time after it): what `lumos viz` plots; `LUMOS_LOG=search` prints each as it comes,
with why it won or lost.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Sequence

from tqdm import tqdm

from lumos.egraph.space import ENode, SearchSpace
from lumos.logs import log
from lumos.search.genome import Genome, Genomes, SearchError, genome_key
from lumos.search.options import CompileOptions
from lumos.search.outcome import Invalid, Measured, Outcome, Rejected, Trial

EXHAUSTED_AFTER = 20
MAX_REJECTED_GENERATIONS = 10



class GeneticSearch:
    """The search state machine over one SearchSpace (see the module docstring)."""

    def __init__(self, space: SearchSpace, options: CompileOptions | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 seeds: Sequence[Callable[[int, ENode], float]] = (),
                 genomes: Genomes | None = None) -> None:
        self.options = options or CompileOptions()
        self.seeds = tuple(seeds)  # costs for Genomes.preferring: generation 0's first picks
        if genomes is not None and genomes.space is not space:
            raise ValueError("GeneticSearch: genomes were made for another space")
        # (a caller's Genomes of this space, if it made one: ranking a large space is slow)
        self.genomes = genomes if genomes is not None else Genomes(space)
        self.rng = random.Random(self.options.seed)
        self.clock = clock
        self.counted = self.rejected = self.generation = self.restarts = 0
        self.stop_reason: str | None = None
        self.first_failure: str | None = None
        self._start: float | None = None
        self._seen_genomes: set[tuple] = set()  # handed out, by genome_key
        self._seen_programs: set[str] = set()   # handed out, by program fingerprint
        self._queue: list[Genome] = []  # this generation, not yet handed out
        self._pending: dict[tuple, Genome] = {}
        self._elites: list[tuple[float, int, Genome]] = []  # (seconds, order, genome)
        self._gen_counts = {Measured: 0, Rejected: 0, Invalid: 0}
        self._improved = False
        self._stale = self._rejected_gens = self._since_promising = 0
        self._bar: tqdm | None = None
        self.history: list[Trial] = []
        self._origins: dict[tuple, str] = {}  # handed out, by genome_key: see Trial.origin
        self._index: dict[tuple, int] = {}  # measured, by genome_key: its Trial.index

    # -- the protocol ------------------------------------------------------------------
    def next_candidate(self) -> Genome | None:
        """The next genome to evaluate, or None when the search is over."""
        if self.stop_reason is not None:
            return None
        if self._start is None:
            self._start = self.clock()
            self._bar = tqdm(total=self.options.limit, desc="lumos search", unit="cand",
                             leave=False, disable=not sys.stderr.isatty())
            self._queue = self._breed()
        if reason := self._budget_spent():
            return self._stop(reason)
        if self._pending and (not self._queue or
                              self.counted + len(self._pending) >= self.options.limit):
            raise RuntimeError(f"{len(self._pending)} candidates are still unreported; "
                               "report them before asking for more")
        if not self._queue:
            self._end_generation()
            if self._rejected_gens >= MAX_REJECTED_GENERATIONS:
                return self._stop(f"the last {self._rejected_gens} generations were all "
                                  f"rejected (first failure: {self.first_failure})")
            self._queue = self._breed()
            if not self._queue:
                return self._stop("no new program left to try")
        genome = self._queue.pop(0)
        self._pending[genome_key(genome)] = genome
        return genome

    def report(self, candidate: Genome, outcome: Outcome) -> None:
        """Record what evaluating `candidate` (as handed out) gave."""
        if not isinstance(outcome, Measured | Rejected | Invalid):
            raise TypeError(f"report: outcome must be Measured, Rejected or Invalid, "
                            f"got {outcome!r}")
        if isinstance(outcome, Measured) and not (
                isinstance(outcome.seconds, int | float) and math.isfinite(outcome.seconds)
                and outcome.seconds >= 0):
            raise ValueError(f"report: Measured seconds must be finite and >= 0, "
                             f"got {outcome.seconds!r}")
        genome = self._pending.pop(genome_key(candidate), None)
        if genome is None:
            raise ValueError("report: that genome is not an outstanding candidate")
        self._gen_counts[type(outcome)] += 1
        self._record(candidate, outcome)
        if isinstance(outcome, Rejected):
            self.rejected += 1
            self.first_failure = self.first_failure or f"rejected: {outcome.reason}"
            return
        self.counted += 1
        best = self.best()
        if isinstance(outcome, Invalid):
            self.first_failure = self.first_failure or f"invalid: {outcome.reason}"
            self._since_promising += best is not None
        else:
            s = outcome.seconds
            if best is None or s < best[1]:
                self._improved = True
            self._elites.append((s, self.counted, genome))
            self._elites = sorted(self._elites)[:self.options.keep_best]
            factor = self.options.early_stop_factor or math.inf
            self._since_promising = 0 if s <= factor * self._elites[0][0] else \
                self._since_promising + 1
        if self._bar is not None:
            if self._elites:
                self._bar.set_postfix_str(f"best {_ms(self._elites[0][0])}", refresh=False)
            self._bar.update(1)

    def best(self) -> tuple[Genome, float] | None:
        """The fastest Measured genome and its seconds (the first of equals), or None."""
        return (dict(self._elites[0][2]), self._elites[0][0]) if self._elites else None

    def run(self, evaluate: Callable[[Genome], Outcome]) -> tuple[Genome, float]:
        """Search to the end with `evaluate`; an exception from it counts as Invalid.
        Returns `best()`; raises SearchError when no candidate was measured."""
        while (genome := self.next_candidate()) is not None:
            try:
                outcome = evaluate(genome)
            except Exception as e:  # a candidate that crashes loses; the search goes on
                outcome = Invalid(f"{type(e).__name__}: {e}")
                log("search", f"candidate failed: {outcome.reason}")
            self.report(genome, outcome)
        best = self.best()
        if best is None:
            raise SearchError(f"no candidate could be measured ({self.counted} invalid, "
                              f"{self.rejected} rejected; {self.stop_reason}); first failure: "
                              f"{self.first_failure}")
        return best

    # -- inside ----------------------------------------------------------------------
    def _record(self, candidate: Genome, outcome: Outcome) -> None:
        """Appends the candidate's Trial and logs (LUMOS_LOG=search) why it won or lost."""
        key = genome_key(candidate)
        k, origin, best = len(self.history), self._origins.get(key, "?"), self.best()
        what = f"candidate {k} (generation {self.generation}, {origin})"
        if isinstance(outcome, Measured):
            s = outcome.seconds
            self._index[key] = k
            if best is None:
                why = "new best: the first measured"
            elif s < best[1]:
                why = f"new best: {best[1] / s:.2f}x faster than {_ms(best[1])}"
            else:
                winner = self._index.get(genome_key(best[0]), "?")
                why = f"lost: {s / best[1]:.2f}x the best, {_ms(best[1])} (candidate {winner})"
            log("search", f"{what}: {_ms(s)}, {why}")
            new = s if best is None else min(s, best[1])
            self.history.append(Trial(k, self.generation, origin, "measured", s, new))
            return
        kind = "rejected" if isinstance(outcome, Rejected) else "invalid"
        note = "never ran, not counted" if kind == "rejected" else "counted, never ranked"
        reason = outcome.reason.splitlines()[0][:200] if outcome.reason else "?"
        log("search", f"{what}: {kind} ({note}): {reason}")
        self.history.append(Trial(k, self.generation, origin, kind, None,
                                  best[1] if best else None))

    def _budget_spent(self) -> str | None:
        o = self.options
        if self.counted >= o.limit:
            return f"limit of {o.limit} candidates reached"
        if o.search_time_limit is not None and \
                self.clock() - self._start >= o.search_time_limit:
            return f"search_time_limit of {o.search_time_limit} s reached"
        patience = 2 * o.stagnation * o.generation_size
        if o.early_stop_factor is not None and self._since_promising >= patience:
            return (f"early stop: {patience} candidates in a row without one within "
                    f"{o.early_stop_factor}x of the best")
        return None

    def _end_generation(self) -> None:
        n = self._gen_counts
        self._stale = 0 if self._improved else self._stale + 1
        all_rejected = n[Rejected] > 0 and n[Measured] + n[Invalid] == 0
        self._rejected_gens = self._rejected_gens + 1 if all_rejected else 0
        best = f"best {_ms(self._elites[0][0])}" if self._elites else "nothing measured yet"
        log("search", f"generation {self.generation}: {n[Measured]} measured, "
                      f"{n[Invalid]} invalid, {n[Rejected]} rejected; {best}")
        self._gen_counts = dict.fromkeys(n, 0)
        self._improved = False
        self.generation += 1

    def _breed(self) -> list[Genome]:
        """The next generation's new, distinct genomes: generation_size of them, or as many
        as the limit leaves to measure (drawing and fingerprinting a genome of a large
        space is slow: a small limit draws only the few it measures)."""
        o, g, rng = self.options, self.genomes, self.rng
        wanted = min(o.generation_size, o.limit - self.counted)
        if self.generation == 0:
            seeds = [lambda c=c: g.preferring(c, rng) for c in self.seeds] + \
                [lambda: g.baseline(rng)]
            make = lambda i: seeds[i]() if i < len(seeds) else g.random(rng)
            origin = lambda i: (f"seed {i}" if i < len(self.seeds) else
                                "baseline" if i == len(self.seeds) else "random")
        elif not self._elites or self._stale >= o.stagnation:
            if self._elites:
                self.restarts += 1
                log("search", f"no new best for {self._stale} generations: restart")
            self._stale = 0
            make = lambda i: g.random(rng)
            origin = lambda i: "random"
        else:
            parents = [e[2] for e in self._elites]
            make = lambda i: g.mutate(parents[i % len(parents)], rng,
                                      rng.randint(1, o.mutations))
            origin = lambda i: \
                f"mutant of {self._index.get(genome_key(parents[i % len(parents)]), '?')}"
        out: list[Genome] = []
        for i in range(o.generation_size):
            if len(out) >= wanted:
                break
            for attempt in range(EXHAUSTED_AFTER):
                genome = make(i) if attempt < EXHAUSTED_AFTER // 2 else g.random(rng)
                key = genome_key(genome)
                if key in self._seen_genomes:
                    continue
                self._seen_genomes.add(key)
                program = g.fingerprint(genome)
                if program not in self._seen_programs:
                    self._seen_programs.add(program)
                    out.append(genome)
                    self._origins[key] = origin(i) if attempt < EXHAUSTED_AFTER // 2 \
                        else "random"
                    break
        return out

    def _stop(self, reason: str) -> None:
        self.stop_reason = reason
        log("search", f"stopped: {reason}; {self.counted} counted, {self.rejected} rejected, "
                      + (f"best {_ms(self._elites[0][0])}" if self._elites else "no best"))
        if self._bar is not None:
            self._bar.close()
        return None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"
