import itertools
import math

import pytest

from lumos.search import (
    CompileOptions,
    GeneticSearch,
    Genomes,
    Invalid,
    Measured,
    Rejected,
    SearchError,
    extract,
    genome_key,
)
from lumos.search.genetic import MAX_REJECTED_GENERATIONS
from tests.search.spaces import alt, grid_space, grid_time, make_space


def drive(search, evaluate):
    """Run the pull loop by hand; returns every (genome, outcome) in order."""
    seen = []
    while (g := search.next_candidate()) is not None:
        outcome = evaluate(g)
        seen.append((g, outcome))
        search.report(g, outcome)
    return seen


def measured(space):
    return lambda g: Measured(grid_time(space, g))


def test_first_candidate_is_the_baseline_and_limit_counts():
    space = grid_space(6, 3)
    search = GeneticSearch(space, CompileOptions(limit=25))
    seen = drive(search, measured(space))
    assert [n.op for _, n in extract(space, seen[0][0])] == ["v0"] * 6 + ["Output"]
    assert len(seen) == search.counted == 25
    assert search.stop_reason.startswith("limit")
    assert search.best() == min(((g, o.seconds) for g, o in seen), key=lambda t: t[1])


def test_seeds_come_before_the_baseline():
    """A backend's seeds are timed first (a search of `limit` = their number times just
    them), then the baseline, then random genomes."""
    space = grid_space(6, 3)
    prefer_v2 = lambda c, n: 0 if n.op == "v2" else 1  # noqa: E731
    search = GeneticSearch(space, CompileOptions(limit=3), seeds=[prefer_v2])
    seen = drive(search, measured(space))
    ops = [[n.op for _, n in extract(space, g)] for g, _ in seen]
    assert ops[0] == ["v2"] * 6 + ["Output"]
    assert ops[1] == ["v0"] * 6 + ["Output"]
    assert len(seen) == 3



def test_a_search_uses_the_callers_genomes_of_its_space_only():
    space, other = grid_space(6, 3), grid_space(5, 3)
    made = Genomes(space)
    assert GeneticSearch(space, genomes=made).genomes is made
    with pytest.raises(ValueError, match="another space"):
        GeneticSearch(other, genomes=made)
    a = drive(GeneticSearch(space, CompileOptions(limit=6), genomes=made), measured(space))
    b = drive(GeneticSearch(space, CompileOptions(limit=6)), measured(space))
    assert a == b  # the same search either way


def test_a_generation_draws_no_more_genomes_than_the_limit_leaves(monkeypatch):
    """limit=2 of a generation of 10: the two seeds are drawn, not 8 genomes more (each a
    fraction of a second on a large space), and the candidates are the same."""
    space = grid_space(6, 3)
    prefer = [lambda c, n, op=op: 0 if n.op == op else 1 for op in ("v2", "v1")]
    drawn = []
    real = Genomes.fingerprint
    monkeypatch.setattr(Genomes, "fingerprint", lambda self, g: drawn.append(g) or real(self, g))
    seen = drive(GeneticSearch(space, CompileOptions(limit=2, generation_size=10),
                               seeds=prefer), measured(space))
    assert len(seen) == 2 and len(drawn) == 2
    assert [[n.op for _, n in extract(space, g)][0] for g, _ in seen] == ["v2", "v1"]

def test_same_seed_same_sequence_and_choice():
    space = grid_space(6, 3)
    runs = [drive(GeneticSearch(space, CompileOptions(limit=40, seed=s)), measured(space))
            for s in (7, 7, 8)]
    assert runs[0] == runs[1]
    assert [g for g, _ in runs[0]] != [g for g, _ in runs[2]]


def test_exhausts_a_small_space_and_finds_its_optimum():
    space = grid_space(3, 3)
    search = GeneticSearch(space, CompileOptions(limit=100, generation_size=4))
    seen = drive(search, measured(space))
    assert len(seen) == 27 and search.stop_reason == "no new program left to try"
    every = [{0: 0, 1: i, 2: j, 3: k} for i, j, k in itertools.product(range(3), repeat=3)]
    assert search.best()[1] == min(grid_time(space, g) for g in every)


def test_genomes_with_the_same_program_are_evaluated_once():
    spec = {"out": [alt("Output", "a", "b")],
            "a": [alt("Neg", "x"), alt("Neg", "y")],  # x and y hold the same input
            "x": [alt("Input", fields=("x",))], "y": [alt("Input", fields=("x",))],
            "b": [alt("P"), alt("Q")]}
    space = make_space(spec, "out")
    gs = Genomes(space)
    search = GeneticSearch(space, CompileOptions(generation_size=4))
    seen = drive(search, lambda g: Measured(1.0))
    assert len(seen) == 2  # 4 genomes, 2 programs
    assert len({gs.fingerprint(g) for g, _ in seen}) == 2
    assert len({genome_key(g) for g, _ in seen}) == 2


def test_rejected_candidates_do_not_count():
    space = grid_space(6, 3)
    calls = itertools.count()
    search = GeneticSearch(space, CompileOptions(limit=7, generation_size=4))
    seen = drive(search, lambda g: Rejected("no") if next(calls) % 2 else
                 Measured(grid_time(space, g)))
    assert search.counted == 7 and search.rejected == 6 and len(seen) == 13


def test_a_fully_rejected_generation_does_not_stall_the_search():
    space = grid_space(6, 3)
    calls = itertools.count()
    search = GeneticSearch(space, CompileOptions(limit=10, generation_size=5))
    seen = drive(search, lambda g: Rejected("cap") if next(calls) < 5 else Measured(1.0))
    assert search.counted == 10 and len(seen) == 15 and search.best() is not None


def test_always_rejected_gives_up_with_the_reason():
    space = grid_space(8, 3)
    search = GeneticSearch(space, CompileOptions(generation_size=2))
    with pytest.raises(SearchError, match="no candidate could be measured.*rejected: too big"):
        search.run(lambda g: Rejected("too big"))
    assert search.rejected == 2 * MAX_REJECTED_GENERATIONS


def test_invalid_and_crashing_candidates_lose():
    space = grid_space(5, 3)
    valid = []

    def evaluate(g):
        ops = [n.op for _, n in extract(space, g)]
        if ops[0] == "v1":
            raise RuntimeError("kernel crashed")
        if ops[1] == "v2":
            return Invalid("wrong output")
        valid.append(grid_time(space, g))
        return Measured(valid[-1])

    def crash(g):
        raise RuntimeError("kernel crashed")

    search = GeneticSearch(space, CompileOptions(limit=60))
    genome, seconds = search.run(evaluate)
    assert search.counted == 60 and len(valid) < 60 and seconds == min(valid)
    ops = [n.op for _, n in extract(space, genome)]
    assert ops[0] != "v1" and ops[1] != "v2"
    with pytest.raises(SearchError, match="invalid: RuntimeError: kernel crashed"):
        GeneticSearch(space, CompileOptions(limit=5)).run(crash)


def test_early_stop():
    space = grid_space(6, 3)
    calls = itertools.count()
    opts = CompileOptions(early_stop_factor=2.0, generation_size=5, stagnation=2)
    search = GeneticSearch(space, opts)
    seen = drive(search, lambda g: Measured(1.0 if next(calls) == 0 else 10.0))
    assert search.counted == len(seen) == 1 + 2 * 2 * 5  # the best, then the patience
    assert search.stop_reason.startswith("early stop")


def test_time_limit():
    space = grid_space(6, 3)
    now = [0.0]

    def evaluate(g):
        now[0] += 1.0
        return Measured(grid_time(space, g))

    search = GeneticSearch(space, CompileOptions(search_time_limit=5.5), clock=lambda: now[0])
    assert len(drive(search, evaluate)) == 6
    assert search.stop_reason.startswith("search_time_limit")


def test_stagnation_restarts_with_fresh_genomes():
    space = grid_space(8, 3)
    search = GeneticSearch(space, CompileOptions(limit=40, generation_size=4, stagnation=2))
    drive(search, lambda g: Measured(1.0))  # nothing ever improves on the first
    assert search.restarts >= 3 and search.counted == 40


def test_protocol_errors():
    space = grid_space(6, 3)
    search = GeneticSearch(space, CompileOptions(generation_size=2))
    g = search.next_candidate()
    with pytest.raises(TypeError, match="Measured, Rejected or Invalid"):
        search.report(g, 1.0)
    with pytest.raises(ValueError, match="finite"):
        search.report(g, Measured(math.nan))
    with pytest.raises(ValueError, match="not an outstanding candidate"):
        search.report({0: 0}, Measured(1.0))
    h = search.next_candidate()  # a generation may be taken ahead
    with pytest.raises(RuntimeError, match="2 candidates are still unreported"):
        search.next_candidate()
    search.report(h, Measured(2.0))
    search.report(g, Measured(1.0))
    with pytest.raises(ValueError, match="not an outstanding candidate"):
        search.report(g, Measured(1.0))
    assert search.next_candidate() is not None and search.best()[1] == 1.0


def test_search_log(monkeypatch, capsys):
    monkeypatch.setenv("LUMOS_LOG", "search")
    space = grid_space(6, 3)
    drive(GeneticSearch(space, CompileOptions(limit=12, generation_size=5)), measured(space))
    err = capsys.readouterr().err
    assert "[lumos:search] generation 0: 5 measured, 0 invalid, 0 rejected; best" in err
    assert "generation 1:" in err and "stopped: limit of 12 candidates reached" in err


def test_history_and_a_log_line_per_candidate(monkeypatch, capsys):
    """Every reported candidate is a Trial (origin, outcome, best after it) and, under
    LUMOS_LOG=search, one line saying why it won or lost."""
    monkeypatch.setenv("LUMOS_LOG", "search")
    space = grid_space(6, 3)
    prefer_v2 = lambda c, n: 0 if n.op == "v2" else 1  # noqa: E731
    search = GeneticSearch(space, CompileOptions(limit=6, generation_size=3),
                           seeds=[prefer_v2])
    outcomes = iter([Measured(2.0), Measured(1.0), Rejected("no C"), Invalid("output 0"),
                     Measured(3.0), Measured(0.5), Measured(4.0)])
    drive(search, lambda g: next(outcomes))
    h = search.history
    assert [t.origin for t in h[:3]] == ["seed 0", "baseline", "random"]
    assert [t.outcome for t in h] == ["measured", "measured", "rejected", "invalid",
                                      "measured", "measured", "measured"]
    assert [t.best for t in h] == [2.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5]
    assert h[4].origin == "mutant of 1" and h[4].generation == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "] candidate " in ln]
    assert len(lines) == len(h)
    assert lines[0].endswith("candidate 0 (generation 0, seed 0): 2000 ms, new best: the "
                             "first measured")
    assert lines[1].endswith("1000 ms, new best: 2.00x faster than 2000 ms")
    assert "rejected (never ran, not counted): no C" in lines[2]
    assert "invalid (counted, never ranked): output 0" in lines[3]
    assert lines[4].endswith("3000 ms, lost: 3.00x the best, 1000 ms (candidate 1)")
