"""KernelSearch on hand-built spaces whose programs' kernels have made-up, deterministic
times: moves judged by the kernels they change, verdicts shared by equal kernels."""

from __future__ import annotations

import random

import pytest

from lumos.egraph.space import SearchSpace
from lumos.search import (
    CompileOptions,
    GeneticSearch,
    Invalid,
    KernelSearch,
    KernelTime,
    Measured,
    Rejected,
    extract,
)
from tests.search.spaces import alt, grid_space, make_space


def kernels_of(space: SearchSpace, genome: dict[int, int],
               cost: dict[tuple[str, tuple], float]) -> tuple[KernelTime, ...]:
    """The program's kernels: a class whose chosen e-node's op starts with "K" writes a
    buffer; its code covers the classes reached through e-nodes whose op starts with "E"
    (read inline), not through the buffers they read. A kernel's time is the sum of
    `cost[(op, fields)]` over its e-nodes; its key, their ops and fields in order."""
    out = []
    for c, n in extract(space, genome):
        if not n.op.startswith("K"):
            continue
        classes, seq, stack = set(), [], [c]
        while stack:
            d = stack.pop()
            m = space.classes[d][genome[d]]
            if d in classes or (d != c and not m.op.startswith("E")):
                continue
            classes.add(d)
            seq.append((m.op, m.fields))
            stack.extend(m.children)
        out.append(KernelTime(repr(seq), c, frozenset(classes),
                              sum(cost.get(s, 0.0) for s in seq)))
    return tuple(out)


def drive(search, space, cost):
    seen = []
    while (g := search.next_candidate()) is not None:
        ks = kernels_of(space, g, cost)
        outcome = Measured(sum(k.seconds for k in ks), ks)
        seen.append((g, outcome))
        search.report(g, outcome)
    return seen


def random_costs(space: SearchSpace, seed: int) -> dict[tuple[str, tuple], float]:
    """A random time in [1, 10) for each e-node with fields."""
    table = random.Random(seed)
    return {(n.op, n.fields): table.uniform(1, 10) for c in space.classes for n in c
            if n.fields}


def as_kernels(space: SearchSpace) -> SearchSpace:
    """grid_space with every class a kernel of its own (ops renamed K...)."""
    return SearchSpace([[type(n)(("K" + n.op) if n.op != "Output" else n.op, n.fields,
                                 n.children) for n in c] for c in space.classes],
                       space.root, space.class_keys)


def test_independent_kernels_reach_the_best_program_in_few_candidates():
    """A grid of 12 classes of 4 alternatives each (4**12 programs), each class its own
    kernel: every candidate tries one move per kernel, so the best program is found within
    a few candidates (a whole-program search needs far more)."""
    space = as_kernels(grid_space(12, 4))
    cost = random_costs(space, 0)
    best = sum(min(cost[(n.op, n.fields)] for n in c) for c in space.classes if c[0].fields)
    search = KernelSearch(space, CompileOptions(limit=100))
    seen = drive(search, space, cost)
    assert search.best()[1] == pytest.approx(best)
    assert len(seen) <= 12, search.stop_reason
    assert search.stop_reason == "no move left to try"
    genetic = GeneticSearch(space, CompileOptions(limit=len(seen), seed=1))
    while (g := genetic.next_candidate()) is not None:  # the same budget, whole programs
        genetic.report(g, Measured(sum(k.seconds for k in kernels_of(space, g, cost))))
    assert genetic.best()[1] > best


def _poisoned(reached: bool) -> tuple[KernelSearch, float, int]:
    """One alternative makes the whole program far slower (an OpenMP kernel waking
    threads that OpenBLAS's keep busy): its runs are cut short. The search, the best
    program's time without it, and the candidates reported; `reached`: a cut-short run
    names the kernels it ran, the poisoned one among them (run in class order, stopped
    after it)."""
    space = as_kernels(grid_space(8, 4))
    cost = random_costs(space, 0)
    poison = next(n for n in space.classes[1] if n.fields and n.op != space.classes[1][0].op)
    best = sum(min(cost[(n.op, n.fields)] for n in c if n is not poison)
               for c in space.classes if c[0].fields)
    search = KernelSearch(space, CompileOptions(limit=200))
    count = 0
    while (g := search.next_candidate()) is not None:
        count += 1
        ks = kernels_of(space, g, cost)
        if any(n is poison for _, n in extract(space, g)):
            ran = []
            for k in sorted(ks, key=lambda k: k.root):
                hit = any(space.classes[c][g[c]] is poison for c in k.classes)
                ran.append(KernelTime(k.key, k.root, k.classes, 1e6 if hit else k.seconds))
                if hit:
                    break
            outcome = Measured(1e6, reached=tuple(ran) if reached else ())
        else:
            outcome = Measured(sum(k.seconds for k in ks), ks)
        search.report(g, outcome)
    return search, best, count


def test_a_run_cut_short_is_tried_again_in_halves():
    """Runs cut short with no kernel times: the moves batched with the one that lost them
    are not lost: the batch is halved until that move stands alone, and the best
    program without it is found."""
    search, best, _ = _poisoned(reached=False)
    assert search.best()[1] == pytest.approx(best)
    assert search.stop_reason == "no move left to try"


def test_a_run_cut_short_names_the_move_that_lost_it():
    """Where a run cut short names the kernels it reached, the move whose kernel alone
    took longer than the incumbent's program is rejected without halving its batch: the
    same best program in fewer candidates than by halves."""
    search, best, count = _poisoned(reached=True)
    assert search.best()[1] == pytest.approx(best)
    assert search.stop_reason == "no move left to try"
    halved, _, halving = _poisoned(reached=False)
    assert halved.best()[1] == pytest.approx(best)
    assert count < halving, (count, halving)


def _chains_reach_their_best_products(seed: int, k: int = 6, v: int = 6) -> int:
    """k kernels P reading k kernels Q, each of v schedules; a Q takes 100x a P's time.
    A move on P touches Q too (the buffer it reads), so a batch moves one of the two:
    the candidates until every Q runs its fastest schedule."""
    spec: dict = {"out": [alt("Output", *[f"p{i}" for i in range(k)])]}
    table = random.Random(seed)
    cost = {}
    for i in range(k):
        spec[f"p{i}"] = [alt("KP", f"q{i}", fields=(i, j)) for j in range(v)]
        spec[f"q{i}"] = [alt("KQ", fields=(i, j)) for j in range(v)]
        perm = list(range(v))
        table.shuffle(perm)
        for j in range(v):
            cost[("KP", (i, j))] = table.uniform(1, 2)
            cost[("KQ", (i, j))] = 100.0 + 20 * perm[j]
    space = make_space(spec, "out")
    search = KernelSearch(space, CompileOptions(limit=200, seed=seed))
    count = 0
    while (g := search.next_candidate()) is not None:
        count += 1
        ks = kernels_of(space, g, cost)
        search.report(g, Measured(sum(k.seconds for k in ks), ks))
        if search.incumbent and sum(cost[(n.op, n.fields)] for _, n in
                                    extract(space, search.incumbent) if n.op == "KQ") == 100 * k:
            return count
    raise AssertionError(f"seed {seed}: the Qs never all reached their best")


def test_the_slower_kernels_moves_come_first():
    """Where two moves share a kernel, the one whose own kernel is slower is tried first:
    the slow Qs reach their best schedules in about as many candidates as they have
    schedules (in random order the cheap Ps' moves took half the slots: 13-17 here)."""
    assert max(_chains_reach_their_best_products(seed) for seed in range(4)) <= 10


def test_an_e_nodes_variants_are_moves_once_it_is_chosen():
    """Each of 6 kernels is one of two e-nodes (ops KA, KB: other code), each at 4 variants
    (fields: a schedule). From KA the search proposes KA's other variants and KB's first
    only (k + v moves, not k * v); it still reaches the best variant of the better e-node
    (coordinate descent: here KB at its first variant is already faster than any KA)."""
    spec: dict = {"out": [alt("Output", *[f"c{i}" for i in range(6)])]}
    for i in range(6):
        spec[f"c{i}"] = [alt(op, fields=(i, v)) for op in ("KA", "KB") for v in range(4)]
    space = make_space(spec, "out")
    table = random.Random(1)
    cost = {(op, (i, v)): (10.0 if op == "KA" else 5.0) + table.uniform(0, 4)
            for i in range(6) for op in ("KA", "KB") for v in range(4)}
    search = KernelSearch(space, CompileOptions(limit=100))
    first = search.next_candidate()  # (the baseline: KA at variant 0 everywhere)
    search.report(first, Measured(1.0, kernels_of(space, first, cost)))
    proposed = search._propose()
    assert {(space.classes[m.cls][m.alt].op, space.classes[m.cls][m.alt].fields[1])
            for m in proposed} <= {("KA", 1), ("KA", 2), ("KA", 3), ("KB", 0)}
    drive(search, space, cost)
    best = sum(min(cost[("KB", (i, v))] for v in range(4)) for i in range(6))
    assert search.best()[1] == pytest.approx(best)


def test_the_search_ends_when_its_moves_stop_paying():
    """One kernel of 60 alternatives as fast as each other: every candidate judges one move
    and keeps none, so after `stagnation * generation_size` (30) candidates without 1% of
    progress the search ends, not at its limit; a fake clock ends it by time instead."""
    space = as_kernels(grid_space(1, 60))
    cost = {(n.op, n.fields): 1.0 for c in space.classes for n in c if n.fields}
    search = KernelSearch(space, CompileOptions(limit=100))
    seen = drive(search, space, cost)
    assert search.stop_reason.startswith("no progress") and "30 candidates" in \
        search.stop_reason
    assert len(seen) <= 32  # (generation 0, 30 candidates; no finals: it never moved)
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # a second a call
        return now[0]
    timed = KernelSearch(space, CompileOptions(limit=100, search_time_limit=30.0), clock=clock)
    drive(timed, space, cost)
    assert timed.stop_reason.startswith("no progress") and " s " in timed.stop_reason


def fusion_space(layers: int) -> tuple[SearchSpace, dict]:
    """Per layer, a producer kernel P (an elementwise op over the layer's input) read by a
    consumer kernel C, which may read P's buffer (ELoad) or compute P inline (EP): inlined,
    P's kernel is gone. Layers are equal (equal kernels), chained by their buffers."""
    spec: dict = {"out": [alt("Output", f"c{layers - 1}")], "x": [alt("Input", fields=("x",))]}
    prev = "x"
    for i in range(layers):
        spec[f"p{i}"] = [alt("KMap", f"pb{i}")]
        spec[f"pb{i}"] = [alt("EP", f"in{i}")]
        spec[f"in{i}"] = [alt("ELoad", prev)]
        spec[f"c{i}"] = [alt("KMap", f"cb{i}")]
        spec[f"cb{i}"] = [alt("EC", f"rd{i}")]
        spec[f"rd{i}"] = [alt("ELoad", f"p{i}"), alt("EP", f"in{i}")]
        prev = f"c{i}"
    cost = {("KMap", ()): 1.0, ("ELoad", ()): 2.0, ("EP", ()): 0.5, ("EC", ()): 0.5}
    return make_space(spec, "out"), cost


def test_a_producer_inlined_by_its_reader_is_kept_and_its_kernel_goes():
    """Reading the producer inline is faster; its kernel is then gone. The layers' equal
    moves share their verdicts: 6 layers take as many candidates as 1."""
    counts = []
    for layers in (1, 6):
        space, cost = fusion_space(layers)
        search = KernelSearch(space, CompileOptions(limit=50))
        counts.append(len(drive(search, space, cost)))
        genome, seconds = search.best()
        reads = [space.class_keys.index(f"rd{i}") for i in range(layers)]
        assert all(space.classes[c][genome[c]].op == "EP" for c in reads)
        assert sum(1 for _, n in extract(space, genome) if n.op == "KMap") == layers
        assert seconds == pytest.approx(4.0 * layers)  # (7.0 unfused)
    assert counts[1] == counts[0] <= 9  # (4 of them the finals)


def test_a_move_into_a_wrong_program_is_not_kept():
    """A candidate that computes a wrong result (Invalid) keeps none of its moves, however
    fast: here every program reading a producer inline is wrong."""
    space, cost = fusion_space(2)
    reads = [space.class_keys.index(f"rd{i}") for i in range(2)]
    search = KernelSearch(space, CompileOptions(limit=50))
    while (g := search.next_candidate()) is not None:
        ks = kernels_of(space, g, cost)
        fused = any(space.classes[c][g[c]].op == "EP" for c in reads if c in g)
        search.report(g, Invalid("output 0 differs") if fused else
                      Measured(sum(k.seconds for k in ks), ks))
    genome, _ = search.best()
    assert all(space.classes[c][genome[c]].op == "ELoad" for c in reads)


def test_limit_counts_and_the_last_candidate_is_the_incumbent():
    space = as_kernels(grid_space(8, 3))
    cost = random_costs(space, 1)
    search = KernelSearch(space, CompileOptions(limit=3))
    seen = drive(search, space, cost)
    assert len(seen) == search.counted <= 3
    assert search.stop_reason.startswith("limit")
    assert search.best()[1] == min(o.seconds for _, o in seen)


def test_seeds_come_first_and_the_baseline_only_if_none_is_measured():
    space = as_kernels(grid_space(4, 3))
    prefer_v2 = lambda c, n: 0 if n.op == "Kv2" else 1  # noqa: E731
    search = KernelSearch(space, CompileOptions(limit=2), seeds=[prefer_v2])
    first = search.next_candidate()
    assert [n.op for _, n in extract(space, first)] == ["Kv2"] * 4 + ["Output"]
    search.report(first, Measured(1.0))
    # (its program reported no kernels to move: the search ends, without the baseline)
    assert search.next_candidate() is None
    # the seed fails: the baseline is generation 0's fallback
    search = KernelSearch(space, CompileOptions(limit=2), seeds=[prefer_v2])
    search.report(search.next_candidate(), Rejected("the C compiler failed"))
    fallback = search.next_candidate()
    assert [n.op for _, n in extract(space, fallback)] == ["Kv0"] * 4 + ["Output"]
    # without seeds the baseline is generation 0
    search = KernelSearch(space, CompileOptions(limit=2))
    assert [n.op for _, n in extract(space, search.next_candidate())] == \
        ["Kv0"] * 4 + ["Output"]


def test_a_batch_that_fails_is_tried_again_in_halves():
    """One move of a batch makes the program fail to compile (Rejected): the batch is tried
    again in halves until that move stands alone; the others are judged as usual."""
    space = as_kernels(grid_space(8, 3))
    cost = random_costs(space, 2)
    best = sum(min(cost[(n.op, n.fields)] for n in c if (n.op, n.fields) != ("Kv2", (3,)))
               for c in space.classes if c[0].fields)
    search = KernelSearch(space, CompileOptions(limit=100))
    while (g := search.next_candidate()) is not None:
        if any(n.op == "Kv2" and n.fields == (3,) for _, n in extract(space, g)):
            search.report(g, Rejected("the C compiler failed"))
            continue
        ks = kernels_of(space, g, cost)
        search.report(g, Measured(sum(k.seconds for k in ks), ks))
    assert search.best()[1] == pytest.approx(best)


def test_the_time_limit_holds_one_more_candidate_and_the_finals():
    """With `search_time_limit`, moves stop while there is still time for one more
    candidate and the finals: each candidate takes 2 s (a fake clock) and 600 moves need
    13 candidates or more, so a 20 s limit stops the moves by 10 s, and the search, finals
    included, ends within the limit."""
    space = as_kernels(grid_space(200, 4))
    cost = random_costs(space, 1)
    now = [0.0]

    def clock() -> float:
        return now[0]

    search = KernelSearch(space, CompileOptions(limit=1000, search_time_limit=20.0),
                          clock=clock)
    seen = []
    while (g := search.next_candidate()) is not None:
        now[0] += 2.0
        ks = kernels_of(space, g, cost)
        seen.append(g)
        search.report(g, Measured(sum(k.seconds for k in ks), ks))
    assert search.stop_reason.startswith("search_time_limit")
    assert 5 <= len(seen) and now[0] <= 20.0
