"""KernelSearch: a search that learns from each kernel's time, not only the program's.

    search = KernelSearch(space, options, seeds=costs)
    while (genome := search.next_candidate()) is not None:
        search.report(genome, evaluate(genome))   # Measured(seconds, kernels), ...
    genome, seconds = search.best()

A program's time is the sum of its kernels' times, and re-picking one e-class changes only
the kernels whose code comes from that class, or that write a buffer it starts or stops
reading; every other kernel keeps its code. So one candidate can try many such moves at
once, and its profile (`Measured.kernels`, from the runtime) judges each by the kernels it
changed: tinygrad's per-kernel search and TVM's per-task tuning, with the kernel
boundaries themselves among the choices (DESIGN.md "Search", notes/search.md).

Generation 0 is one genome per seed cost (a backend's rules of thumb); the baseline only
where there are no seeds or none of them could be measured (a large model's unfused
program took a third of a search's time to compile, and never won); the fastest becomes
the incumbent. Every later candidate is the
incumbent with a batch of moves. A move re-picks one class of the incumbent that has a
choice to make; the classes the new choice reaches that the incumbent does not take their
first alternative (a shallow move) or their second (a deep move: a producer read inline
is then computed inline down its own chain). Moves of a batch touch disjoint kernels of
the incumbent. After the run, moves that changed common kernels form a group; a group
whose new kernels take less time than the old ones they replace, by `MARGIN` or by more
than the unchanged kernels of about that length moved between the two runs (the machine's
noise: `NOISE_NEAR`, `NOISE_QUANTILE`), the old times scaled by how those drifted, is
kept: the incumbent takes its choices. A move that gained less than the noise is judged
once more in a later candidate.

A candidate that fails (Rejected: its code would not compile; Invalid: it ran wrong), or
whose run was cut short (far slower than the incumbent: no kernel times), is tried again
in halves, until the move that failed it stands alone and is rejected. A run cut short
that names the kernels it reached (`Measured.reached`) needs no halving where one of
them, new, took longer alone than the incumbent's whole program: the moves that made it
are judged apart, the rest tried again together.

A move is known by its signature: the code (keys) of the kernels it touches, where in its
kernel the class lies, and the e-node it picks. A verdict holds for every move of that
signature: repeated layers (the same kernels) are decided once, each kept move is tried
at once wherever else it applies, and a rejected one is not tried again. Verdicts reached
by kernel times outlive the search (`known`, `learned`: search.verdicts keeps them per
machine), so a later search of the same kernels starts from them. The search ends
at `limit` counted candidates, at `search_time_limit` (less the time one more candidate
and the finals are expected to take), when `stagnation * generation_size` candidates in
a row, or a `stagnation`th of `search_time_limit`, kept less than `MIN_PROGRESS` of the
incumbent's time, or when no move is left to try;
then the incumbent and generation 0's best are timed in turns (`FINAL_ROUNDS`), and
best() is the one of the lower median: a search never returns a program slower than its
seed by noise in the per-kernel judgements.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tqdm import tqdm

from lumos.egraph.space import ENode, SearchSpace
from lumos.logs import log
from lumos.search.genome import Genome, Genomes, SearchError, genome_key
from lumos.search.options import CompileOptions
from lumos.search.outcome import Invalid, KernelTime, Measured, Outcome, Rejected, Trial

MARGIN = 0.02  # a group of moves is kept when its kernels are at least this much faster
MIN_GAIN = 2e-7  # ... and by at least this many seconds
MAX_MOVES = 48  # moves per candidate
FINAL_ROUNDS = 2  # the incumbent and generation 0's best, timed in turns this many times
# the search ends once `stagnation * generation_size` candidates in a row, or a
# `stagnation`th of `search_time_limit`, have kept moves worth less than this fraction of
# the incumbent's kernel time together (tinygrad's BEAM ends a beam at its minimum
# progress): the moves left are not worth their candidates
MIN_PROGRESS = 0.01
NOISE_NEAR = 9  # a group's noise: the unchanged kernels this many nearest its old time ...
NOISE_QUANTILE = 0.75  # ... how far this quantile of them moved
KernelId = tuple[int, str]  # (root class, key)


@dataclass(frozen=True)
class Move:
    cls: int
    alt: int
    deep: bool
    signature: str


class KernelSearch:
    """The search state machine (see the module docstring); the same protocol as
    GeneticSearch: `next_candidate`, `report`, `best`, `run`."""

    def __init__(self, space: SearchSpace, options: CompileOptions | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 seeds: Sequence[Callable[[int, ENode], float]] = (),
                 genomes: Genomes | None = None,
                 known: Mapping[str, bool] | None = None) -> None:
        """`known`: verdicts of earlier searches by move signature (search.verdicts)."""
        self.options = options or CompileOptions()
        self.space = space
        if genomes is not None and genomes.space is not space:
            raise ValueError("KernelSearch: genomes were made for another space")
        self.genomes = genomes if genomes is not None else Genomes(space)
        self.seeds = tuple(seeds)
        self.rng = random.Random(self.options.seed)
        self.clock = clock
        self.counted = self.rejected = self.generation = 0
        self.kept = self.tried = 0  # moves
        # (counted and clock at the last progress, kept gain since: MIN_PROGRESS)
        self._progress_at: tuple[int, float] | None = None
        self._gained = 0.0
        self.stop_reason: str | None = None
        self.first_failure: str | None = None
        self._start: float | None = None
        self._queue: list[Genome] = []  # generation 0, not yet handed out
        self._pending: dict[tuple, tuple[Genome, list[Move]]] = {}
        self._best: tuple[float, int, Genome] | None = None
        self.incumbent: Genome | None = None
        self._kernels: dict[KernelId, KernelTime] = {}  # the incumbent's, last measured
        self._known = dict(known or {})  # move signature -> kept, by earlier searches
        self._verdicts: dict[str, bool] = dict(self._known)  # move signature -> kept
        self.recalled: set[str] = set()  # signatures met here that were decided before
        self._judged: set[str] = set()  # signatures given a verdict by kernel times here
        self._tries: dict[str, int] = {}  # move signature -> times judged
        self._retry: list[list[Move]] = []  # parts of a failed batch, to try again
        self._texts: dict[tuple[int, int], str] = {}  # (class, alternative) -> its e-node's
        self._incumbent_seconds = math.inf
        self._first: tuple[float, Genome] = (math.inf, {})  # generation 0's best
        self._final = False  # the moves are over: the finals are handed out
        self._finals: list[Genome] = []
        self._final_times: dict[tuple, tuple[Genome, list[float]]] = {}
        self._last_reason = ""
        self._handed = 0.0  # the clock when the last candidate was handed out
        self._durations: list[float] = []  # seconds from handing out to report, per run
        self._bar: tqdm | None = None
        self.history: list[Trial] = []  # one per reported candidate (lumos viz plots it)
        self._origins: dict[tuple, str] = {}  # handed out, by genome_key: see Trial.origin
        self._fallback: list[Genome] = []  # generation 0's baseline, where seeds come first

    # -- the protocol ------------------------------------------------------------------
    def next_candidate(self) -> Genome | None:
        """The next genome to evaluate, or None when the search is over."""
        if self.stop_reason is not None:
            return None
        if self._start is None:
            self._start = self.clock()
            self._bar = tqdm(total=self.options.limit, desc="lumos search", unit="cand",
                             leave=False, disable=not sys.stderr.isatty())
            g, rng = self.genomes, self.rng
            seeded = [g.preferring(c, rng) for c in self.seeds] + [g.baseline(rng)]
            self._queue = list({genome_key(x): x for x in seeded}.values())
            for i, x in enumerate(seeded[::-1]):  # (a seed equal to the baseline: the seed)
                self._origins[genome_key(x)] = "baseline" if i == 0 else \
                    f"seed {len(seeded) - 1 - i}"
            if self.seeds and len(self._queue) > 1:  # the baseline: if no seed is measured
                self._fallback = [self._queue.pop()]
        if not self._queue and not self._pending and self.incumbent is None:
            self._queue, self._fallback = self._fallback, []
        if self._queue and self.counted + len(self._pending) < self.options.limit:
            genome = self._queue.pop(0)
            self._pending[genome_key(genome)] = (genome, [])
            self._handed = self.clock()
            return genome
        if self._pending:
            raise RuntimeError(f"{len(self._pending)} candidates are still unreported; "
                               "report them before asking for more")
        self._queue = []  # (the limit came first)
        if self.incumbent is None:
            return self._stop("no candidate of generation 0 could be measured")
        reason = self._budget_spent()
        moves = [] if reason or self._final else self._retried() or self._propose()
        if not moves:
            if not self._final:  # the finals: the incumbent against generation 0's best,
                self._final = True  # in turns (one program timed now and one then is
                self._last_reason = reason or "no move left to try"  # no comparison)
                inc, first = dict(self.incumbent), self._first[1]
                self._finals = [inc, first] * FINAL_ROUNDS \
                    if genome_key(inc) != genome_key(first) else []
            if not self._finals or self.counted >= self.options.limit:
                return self._stop(self._last_reason)
            genome = self._finals.pop(0)
        else:
            genome = self._apply(moves)
        self.generation += 1
        self._pending[genome_key(genome)] = (genome, moves)
        self._origins[genome_key(genome)] = f"{len(moves)} moves" if moves else "final"
        self._handed = self.clock()
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
        entry = self._pending.pop(genome_key(candidate), None)
        if entry is None:
            raise ValueError("report: that genome is not an outstanding candidate")
        genome, moves = entry
        if not isinstance(outcome, Rejected):  # (how long a candidate takes, handed out
            self._durations.append(self.clock() - self._handed)  # to reported)
        self._record(genome, outcome)
        if isinstance(outcome, Rejected):
            self.rejected += 1
            self.first_failure = self.first_failure or f"rejected: {outcome.reason}"
        else:
            self.counted += 1
        if isinstance(outcome, Invalid):
            self.first_failure = self.first_failure or f"invalid: {outcome.reason}"
        if isinstance(outcome, Measured):
            if self._best is None or outcome.seconds < self._best[0]:
                self._best = (outcome.seconds, self.counted, dict(genome))
            if self._bar is not None:
                self._bar.set_postfix_str(f"best {_ms(self._best[0])}", refresh=False)
        if self._bar is not None and not isinstance(outcome, Rejected):
            self._bar.update(1)
        if not moves and self._final:  # a final
            if isinstance(outcome, Measured):
                self._final_times.setdefault(genome_key(genome), (genome, []))[1].append(
                    outcome.seconds)
            return
        if not moves:  # generation 0
            if isinstance(outcome, Measured) and (
                    self.incumbent is None or outcome.seconds < self._incumbent_seconds):
                self.incumbent = dict(genome)
                self._incumbent_seconds = outcome.seconds
                self._kernels = {(k.root, k.key): k for k in outcome.kernels}
                self._first = (outcome.seconds, dict(genome))
            return
        # a run cut short (Measured without the kernels' times that the incumbent's had:
        # past the bound) or failed: which move did it?
        cut = isinstance(outcome, Measured) and not outcome.kernels and bool(self._kernels)
        if cut and len(moves) > 1 and (bad := self._culprits(genome, moves, outcome)):
            # the kernels it reached name the moves that lost it: those alone are judged
            # (one: rejected; several together: halved as usual), the rest tried again
            rest = [m for i, m in enumerate(moves) if i not in bad]
            if len(bad) == 1:
                self.tried += 1
                self._verdicts.setdefault(moves[bad[0]].signature, False)
            else:
                self._retry.append([moves[i] for i in bad])
            self._retry.append(rest)
            log("search", f"candidate {self.generation}: {len(moves)} moves cut short by "
                          f"{len(bad)} of them; the other {len(rest)} tried again")
            return
        if (cut or not isinstance(outcome, Measured)) and len(moves) > 1:
            half = len(moves) // 2
            self._retry += [moves[half:], moves[:half]]
            log("search", f"candidate {self.generation}: {len(moves)} moves "
                          f"{'cut short' if cut else type(outcome).__name__}; "
                          "tried again in halves")
            return
        self.tried += len(moves)
        if not isinstance(outcome, Measured) or not outcome.kernels:
            for m in moves:  # a failed or cut-short run: none of them is kept
                self._verdicts.setdefault(m.signature, False)
            log("search", f"candidate {self.generation}: {len(moves)} moves, none kept "
                          f"({type(outcome).__name__})")
            return
        self._judge(genome, moves, outcome)

    def best(self) -> tuple[Genome, float] | None:
        """The fastest Measured genome and its seconds, or None: of the finals (the
        incumbent and generation 0's best timed in turns) by their medians where they
        ran, else the fastest measured candidate (the first of equals)."""
        if self._final_times:
            genome, times = min(self._final_times.values(),
                                key=lambda e: statistics.median(e[1]))
            return dict(genome), statistics.median(times)
        return (dict(self._best[2]), self._best[0]) if self._best else None

    def bound(self) -> float:
        """How long a candidate may run before its timing may stop (it has lost)."""
        if self._queue or self.incumbent is None:  # generation 0: programs against each other
            return 2 * self._best[0] if self._best is not None else math.inf
        return 10 * self._incumbent_seconds  # later: every kernel's time is wanted

    def learned(self) -> dict[str, bool]:
        """The verdicts this search reached by kernel times that earlier ones had not (see
        `known`); not those of failed runs (a compile that timed out on a busy machine)."""
        return {s: self._verdicts[s] for s in self._judged
                if self._known.get(s) != self._verdicts[s]}

    def check_all(self) -> bool:
        """Whether every measured candidate must be checked against the reference, not only
        a new best: yes, its kernels may be kept."""
        return True

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

    # -- moves -------------------------------------------------------------------------
    def _record(self, genome: Genome, outcome: Outcome) -> None:
        """Appends the candidate's Trial."""
        kind = {Measured: "measured", Rejected: "rejected", Invalid: "invalid"}[type(outcome)]
        seconds = outcome.seconds if isinstance(outcome, Measured) else None
        best = self._best[0] if self._best else None
        if seconds is not None:
            best = seconds if best is None else min(best, seconds)
        self.history.append(Trial(len(self.history), self.generation,
                                  self._origins.get(genome_key(genome), "?"), kind, seconds,
                                  best))

    def _budget_spent(self) -> str | None:
        o = self.options
        if self.counted + 2 * FINAL_ROUNDS >= o.limit:  # (kept for the finals)
            return f"limit of {o.limit} candidates reached"
        if self._progress_at is None:  # (the moves begin)
            self._progress_at = (self.counted, self.clock())
        patience = o.stagnation * o.generation_size
        if self.counted - self._progress_at[0] >= patience:
            return (f"no progress: the moves kept in the last {patience} candidates gained "
                    f"under {MIN_PROGRESS:.0%}")
        if o.search_time_limit is not None and \
                self.clock() - self._progress_at[1] >= o.search_time_limit / o.stagnation:
            return (f"no progress: the moves kept in the last "
                    f"{o.search_time_limit / o.stagnation:.3g} s gained under {MIN_PROGRESS:.0%}")
        if o.search_time_limit is not None:
            # (the time left must hold one more candidate and the finals: re-timings of
            # programs already compiled, each at most the cheapest candidate so far or
            # the incumbent's runs, warm-up included)
            d = self._durations
            final = min(min(d), (o.trials + 2) * self._incumbent_seconds) if d else 0.0
            ahead = statistics.mean(d) + 2 * FINAL_ROUNDS * final if d else 0.0
            if self.clock() - self._start + ahead >= o.search_time_limit:
                return f"search_time_limit of {o.search_time_limit} s reached"
        return None

    def _layout(self) -> tuple[dict[int, list[KernelId]], dict[int, KernelId],
                               dict[KernelId, list[int]]]:
        """Of the incumbent: class -> kernels computing it, root class -> its kernel, and
        each kernel's classes in a canonical order (depth first from its root through the
        chosen e-nodes, children in order), which equal kernels share."""
        assert self.incumbent is not None
        by_class: dict[int, list[KernelId]] = {}
        by_root: dict[int, KernelId] = {}
        order: dict[KernelId, list[int]] = {}
        nodes = self.space.classes
        for kid, k in self._kernels.items():
            by_root[k.root] = kid
            seq, seen, stack = [], set(), [k.root]
            while stack:
                c = stack.pop()
                if c in seen or c not in k.classes or c not in self.incumbent:
                    continue
                seen.add(c)
                seq.append(c)
                by_class.setdefault(c, []).append(kid)
                stack.extend(reversed(nodes[c][self.incumbent[c]].children))
            order[kid] = seq
        return by_class, by_root, order

    def _propose(self) -> list[Move]:
        """A batch of moves on disjoint kernels: those of signatures kept elsewhere first,
        then untried ones, those of the slowest kernels first. The variants of an e-node
        (same op and children, other fields: a kernel's schedules) are moves once it is
        chosen; from another e-node, only its first variant is (coordinate descent: a
        class of k e-nodes of v variants each costs k + v moves, not k * v, and a
        hopeless kernel is timed once, not v times)."""
        assert self.incumbent is not None
        g, nodes = self.incumbent, self.space.classes
        by_class, by_root, order = self._layout()
        position = {(kid, c): i for kid, seq in order.items() for i, c in enumerate(seq)}
        known, fresh = [], []
        for c, choice in g.items():
            alts = self.genomes.grounded[c]
            if len(alts) < 2 or c not in by_class:
                continue
            home = by_class[c][0]
            first: dict[tuple, int] = {}  # (op, children) -> its first alternative
            for j in alts:
                first.setdefault((nodes[c][j].op, nodes[c][j].children), j)
            mine = (nodes[c][choice].op, nodes[c][choice].children)
            for j in alts:
                shape = (nodes[c][j].op, nodes[c][j].children)
                if j == choice or shape != mine and first[shape] != j:
                    continue  # (another variant of another e-node: once that is chosen)
                touched = set(by_class[c])
                for n in (nodes[c][choice], nodes[c][j]):
                    touched.update(by_root[p] for p in n.children if p in by_root)
                reaches = any(p not in g for p in nodes[c][j].children)
                for deep in (False, True) if reaches else (False,):  # (else: the same)
                    sig = _signature(self._kernels, touched, home, position[(home, c)],
                                     self._node_text(c, j), deep)
                    verdict = self._verdicts.get(sig)
                    if sig in self._known:
                        self.recalled.add(sig)
                    if verdict is None:
                        fresh.append((Move(c, j, deep, sig), touched))
                    elif verdict:
                        known.append((Move(c, j, deep, sig), touched))
        self.rng.shuffle(known)
        self.rng.shuffle(fresh)
        # where moves share a kernel, those on the slower kernels first: a kernel's moves
        # gain at most its time (ties in random order)
        fresh.sort(key=lambda e: -self._kernels[by_class[e[0].cls][0]].seconds)
        batch, used, sigs = [], set(), set()
        for m, touched in known + fresh:
            if len(batch) >= MAX_MOVES:
                break
            # one move a kernel; a new signature once a batch (its verdict then holds)
            if touched & used or (m.signature in sigs and m.signature not in self._verdicts):
                continue
            batch.append(m)
            used |= touched
            sigs.add(m.signature)
        return batch

    def _node_text(self, c: int, j: int) -> str:
        text = self._texts.get((c, j))
        if text is None:
            n = self.space.classes[c][j]
            text = self._texts[(c, j)] = repr((n.op, n.fields))
        return text

    def _retried(self) -> list[Move]:
        """The next part of a batch whose candidate failed (Rejected or Invalid), the
        moves still open on the incumbent."""
        assert self.incumbent is not None
        while self._retry:
            moves = [m for m in self._retry.pop() if m.cls in self.incumbent and
                     self.incumbent[m.cls] != m.alt and m.signature not in self._verdicts]
            if moves:
                return moves
        return []

    def _apply(self, moves: list[Move]) -> Genome:
        """The incumbent with `moves`: classes a move newly reaches take their first
        alternative (shallow) or their second where they have one (deep: in a backend's
        order, the baseline's first, then what fuses or calls a library), then cycles
        are repaired."""
        assert self.incumbent is not None
        g = dict(self.incumbent)
        nodes, grounded = self.space.classes, self.genomes.grounded
        for m in moves:
            g[m.cls] = m.alt
        for m in moves:
            stack = list(nodes[m.cls][m.alt].children)
            while stack:
                c = stack.pop()
                if c in g:
                    continue
                g[c] = grounded[c][min(1, len(grounded[c]) - 1)] if m.deep else grounded[c][0]
                stack.extend(nodes[c][g[c]].children)
        return self.genomes.repair(g, self.rng)

    def _culprits(self, genome: Genome, moves: list[Move], outcome: Measured) -> list[int]:
        """Of a run cut short: the moves (indices) that changed a kernel it reached that is
        not the incumbent's and took longer alone than all the incumbent's kernels
        together (any program with it loses), or [] when none, or all, can be told."""
        total = sum(k.seconds for k in self._kernels.values())
        slow = [k for k in outcome.reached
                if (k.root, k.key) not in self._kernels and k.seconds > total]
        if not slow:
            return []
        changed = self._changed(genome, moves)
        bad = sorted({i for k in slow for i, d in enumerate(changed)
                      if k.root in d or not k.classes.isdisjoint(d)})
        return bad if len(bad) < len(moves) else []

    def _changed(self, genome: Genome, moves: list[Move]) -> list[set[int]]:
        """The classes each move changed: its own, those below its old choice that the
        candidate no longer reaches (and the buffers they read), and those below its new
        choice that the incumbent did not reach."""
        assert self.incumbent is not None
        g0, nodes = self.incumbent, self.space.classes
        changed: list[set[int]] = []
        for m in moves:
            d = {m.cls}
            for program, other, start in ((g0, genome, g0[m.cls]), (genome, g0, m.alt)):
                seen: set[int] = set()
                stack = list(nodes[m.cls][start].children)
                while stack:
                    c = stack.pop()
                    if c in seen or c not in program:
                        continue
                    seen.add(c)
                    d.add(c)
                    if c not in other:  # (in one program only: what it reads changed too)
                        stack.extend(nodes[c][program[c]].children)
            changed.append(d)
        return changed

    def _judge(self, genome: Genome, moves: list[Move], outcome: Measured) -> None:
        """Keep the groups of moves whose kernels got faster (see the module docstring)."""
        assert self.incumbent is not None
        old, g0 = self._kernels, self.incumbent
        new = {(k.root, k.key): k for k in outcome.kernels}
        gone = [kid for kid in old if kid not in new]
        made = [kid for kid in new if kid not in old]
        same = [kid for kid in new if kid in old]
        before = sum(old[k].seconds for k in same)
        drift = sum(new[k].seconds for k in same) / before if before > 0 else 1.0
        # how far unchanged kernels' times moved between the two runs (the machine's
        # noise), by their length: a group must gain more than the unchanged kernels
        # nearest its old time moved, relative to it (short kernels move more)
        by_size = sorted((old[k].seconds * drift, abs(new[k].seconds / (old[k].seconds * drift)
                                                      - 1)) for k in same if old[k].seconds > 0)
        lengths = [t for t, _ in by_size]

        def margin(cost: float) -> float:
            if not by_size:
                return MARGIN
            i = bisect.bisect_left(lengths, cost)
            lo = max(0, min(i - NOISE_NEAR // 2, len(by_size) - NOISE_NEAR))
            near = sorted(m for _, m in by_size[lo:lo + NOISE_NEAR])
            return max(MARGIN, near[int(NOISE_QUANTILE * (len(near) - 1))])
        changed = self._changed(genome, moves)
        parent = list(range(len(moves)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i
        owner: dict[KernelId, int] = {}  # changed kernel -> a move touching it
        for side, kids in ((old, gone), (new, made)):
            for kid in kids:
                k = side[kid]
                for i, d in enumerate(changed):
                    if k.root in d or not k.classes.isdisjoint(d):
                        if kid in owner:
                            parent[find(i)] = find(owner[kid])
                        else:
                            owner[kid] = i
        groups: dict[int, list[int]] = {}
        for i in range(len(moves)):
            groups.setdefault(find(i), []).append(i)
        cost_old: dict[int, float] = dict.fromkeys(groups, 0.0)
        cost_new: dict[int, float] = dict.fromkeys(groups, 0.0)
        for kid, i in owner.items():
            r = find(i)
            if kid in old and kid not in new:
                cost_old[r] += old[kid].seconds * drift
            else:
                cost_new[r] += new[kid].seconds
        keep: set[int] = set()
        for r, members in groups.items():
            gain = cost_old[r] - cost_new[r]
            ok = gain > max(margin(cost_old[r]) * cost_old[r], MIN_GAIN)
            for i in members:  # (a gain within the noise is tried again, once)
                sig = moves[i].signature
                self._tries[sig] = self._tries.get(sig, 0) + 1
                if ok or gain <= 0 or self._tries[sig] >= 2:
                    self._verdicts[sig] = ok
                    self._judged.add(sig)
            if ok:
                keep.update(members)
                self._gained += gain
                log("search", "  kept " + ", ".join(
                    self._node_text(moves[i].cls, moves[i].alt)[:120] for i in members)
                    + f": {_ms(cost_old[r])} -> {_ms(cost_new[r])}")
        if keep:
            g = dict(g0)
            for i in keep:
                for c in changed[i]:
                    if c in genome:
                        g[c] = genome[c]
            self.incumbent = self.genomes.repair(g, self.rng)
            kept = {kid for kid, i in owner.items() if find(i) in {find(j) for j in keep}}
            self._kernels = {kid: (new[kid] if kid in new else old[kid])
                             for kid in (set(same) | (set(gone) - kept) | (set(made) & kept))}
            self.kept += len(keep)
        else:
            self._kernels = {kid: new[kid] if kid in new else k for kid, k in old.items()}
        orphans = len(set(gone) | set(made)) - len(owner)
        total = sum(k.seconds for k in self._kernels.values())
        if self._gained >= MIN_PROGRESS * total:
            self._progress_at, self._gained = (self.counted, self.clock()), 0.0
        log("search", f"candidate {self.generation}: {len(moves)} moves in {len(groups)} "
                      f"groups, {len(keep)} kept; {len(gone)} kernels replaced by {len(made)}"
                      f"{f' ({orphans} changed by no move)' if orphans else ''}; drift "
                      f"{drift:.3f}, noise {margin(total / max(len(old), 1)):.1%} at a mean "
                      f"kernel's length; incumbent ~{_ms(total)} of kernels")

    def _stop(self, reason: str) -> None:
        self.stop_reason = reason
        log("search", f"stopped: {reason}; {self.counted} counted, {self.rejected} rejected, "
                      f"{self.kept} of {self.tried} moves kept, {len(self.recalled)} "
                      "decided by earlier searches, "
                      + (f"best {_ms(self._best[0])}" if self._best else "no best"))
        if self._bar is not None:
            self._bar.close()
        return None


def _signature(kernels: dict[KernelId, KernelTime], touched: set[KernelId], home: KernelId,
               position: int, node: str, deep: bool) -> str:
    """A move's identity wherever the same kernels hold the same choice (see the module
    docstring); `node`: the text of the e-node it picks."""
    text = repr((sorted(kernels[k].key for k in touched), kernels[home].key, position,
                 node, deep))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"
