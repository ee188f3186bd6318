"""Budgets, the hard time limit and the egglog log."""

import os
import time

import numpy as np
import pytest

import lumos
from lumos.egraph import CORE, Budget, Rules, Stage, build_spaces, decode, worker
from lumos.egraph.build import saturate
from lumos.frontend.tensor import iota
from lumos.runtime.reference import run_hlir
from lumos.shape import sym

# associativity + commutativity: the e-graph of a sum of n terms grows like 3**n
EXPLODE = """
(ruleset explode)
(rewrite (Add a b) (Add b a) :ruleset explode)
(rewrite (Add (Add a b) c) (Add a (Add b c)) :ruleset explode)
"""


def long_sum(n: int) -> lumos.Graph:
    g = lumos.Graph()
    e = sym(0)
    for i in range(n):
        e = e + g.dim(f"d{i}", 1, 4)
    iota(g, e, (2,), lumos.i64).output()
    return g


def check_runs(g: lumos.Graph, space) -> None:
    h = decode(space, [0] * len(space.classes), g.dims)
    dims = {d: 2 for d in g.dims}
    (got,) = run_hlir(h, {}, dims)
    np.testing.assert_array_equal(got, run_hlir(g, {}, dims)[0])


def test_node_budget_stops_an_explosive_ruleset(capsys):
    g = long_sum(10)
    rules = CORE + Rules((EXPLODE,), (Stage(bounded=("explode",), rounds=50),))
    (space,) = build_spaces(g, rules=rules, budget=Budget(max_enodes=5000, max_iterations=50))
    err = capsys.readouterr().err
    assert "warning: e-graph budget hit" in err and "max_enodes=5000" in err
    check_runs(g, space)


def test_iteration_budget_bounds_rounds(monkeypatch, capsys):
    g = long_sum(6)
    rules = CORE + Rules((EXPLODE,), (Stage(bounded=("explode",), rounds=50),))
    monkeypatch.setenv("LUMOS_LOG", "egglog")
    build_spaces(g, rules=rules, budget=Budget(max_iterations=2))
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "explode:" in ln)
    assert line.split()[2] == "2"  # "[lumos:egglog] explode: 2 iterations ..."


def test_time_limit_kills_a_runaway_child(capsys):
    g = long_sum(16)
    rules = CORE + Rules((EXPLODE,), (Stage(saturate=("explode",)),))
    build_spaces(long_sum(2), budget=Budget(time_limit=30))  # start the worker
    t = time.perf_counter()
    (space,) = build_spaces(g, rules=rules, budget=Budget(max_enodes=10**9, time_limit=1.5))
    assert time.perf_counter() - t < 10
    err = capsys.readouterr().err
    assert "ran past its time limit of 3 s and was killed" in err  # twice the limit
    assert all(len(c) == 1 for c in space.classes)  # the graph without rewrites
    check_runs(g, space)
    # the next limited build starts a fresh worker
    (again,) = build_spaces(long_sum(3), budget=Budget(time_limit=30))
    assert again.num_enodes > 0


MARK = """
(ruleset mark)
(rewrite (Num 7) (Num 7) :ruleset mark)
"""


def test_time_limit_stops_saturation_but_runs_the_required_stages(capsys):
    """Past the limit the stages left are skipped, but for the required ones (a backend's
    lowering), which run to the end: the space is smaller, never unexecutable."""
    g = long_sum(8)
    rules = CORE + Rules((EXPLODE,), (Stage(bounded=("explode",), rounds=50),)) + \
        Rules((MARK,), (Stage(saturate=("mark",), required=True),))
    (space,) = saturate(g, [{}], rules, Budget(max_enodes=10**9, time_limit=0.0))
    assert "saturation ran past its time limit of 0 s" in capsys.readouterr().err
    ran = [r.ruleset for r in space.saturation]
    assert "explode" not in ran and ran[-1] == "mark"
    check_runs(g, space)


def test_a_lost_bucket_ends_the_other_at_once(monkeypatch, capsys):
    """Two combinations side by side: when one is lost (its child died here at once), the
    other's child, still saturating a runaway e-graph, is killed too instead of waited
    for, and every space is the graph without rewrites."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    real, calls = worker.call, []

    def first_lost(fn, args, limit):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(1)  # (the other child is saturating by now)
            raise worker.Lost("died")
        return real(fn, args, limit)

    monkeypatch.setattr(worker, "call", first_lost)
    rules = CORE + Rules((EXPLODE,), (Stage(saturate=("explode",)),))
    t = time.perf_counter()
    spaces = build_spaces(long_sum(16), [{"d0": (1, 1)}, {"d0": (2, 4)}], rules=rules,
                          budget=Budget(max_enodes=10**9, time_limit=120))
    assert time.perf_counter() - t < 30  # not the other's 120 s
    assert "e-graph saturation died" in capsys.readouterr().err
    assert len(spaces) == 2 and all(len(c) == 1 for sp in spaces for c in sp.classes)
    assert not worker._started  # none left running


def test_worker_returns_what_in_process_does():
    g = long_sum(3)
    assert build_spaces(g, budget=Budget(time_limit=30)) == build_spaces(g)


def test_a_worker_runs_egglog_on_one_thread_unless_told(monkeypatch):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    worker.stop()
    assert worker.call(os.getenv, ("RAYON_NUM_THREADS",), 30) == "1"
    monkeypatch.setenv("RAYON_NUM_THREADS", "3")
    worker.stop()
    assert worker.call(os.getenv, ("RAYON_NUM_THREADS",), 30) == "3"
    worker.stop()


def test_a_warmed_worker_is_the_one_a_build_uses():
    worker.stop()
    worker.warm()
    started = worker._started[:]
    worker.warm()  # already starting: no second process
    assert worker._started == started and started[0].proc.poll() is None
    g = long_sum(3)
    assert build_spaces(g, budget=Budget(time_limit=30)) == build_spaces(g)
    assert worker._started == started


def test_dim_buckets_saturate_side_by_side(monkeypatch):
    """Two bucket combinations: two workers at once (on a machine of several cores), the
    spaces those of the in-process build, in order; one worker stays for the next build."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    worker.stop()
    g = lumos.Graph()
    x = g.tensor(("n", 4), name="x")
    (x.exp() * 2.0).sum(1).output()
    bounds = [{"n": (1, 1)}, {"n": (2, 64)}]
    busy, most, real = [0], [0], worker.call

    def counted(*a):
        busy[0] += 1
        most[0] = max(most[0], busy[0])
        try:
            time.sleep(0.5)  # (both started before either ends)
            return real(*a)
        finally:
            busy[0] -= 1

    monkeypatch.setattr(worker, "call", counted)
    got = build_spaces(g, bounds, budget=Budget(time_limit=60))
    assert got == build_spaces(g, bounds) and most[0] == 2
    assert len(worker._started) == len(worker._idle) == 1  # one kept for the next build


def test_log_prints_per_ruleset_matches(monkeypatch, capsys):
    monkeypatch.setenv("LUMOS_LOG", "egglog")
    g = lumos.Graph()
    x = g.tensor((4,), name="x")
    (x * 2.0).output()
    for budget in (Budget(), Budget(time_limit=30)):  # in process and in the worker
        build_spaces(g, budget=budget)
        err = capsys.readouterr().err
        for rs in ("expr", "dtype", "algebra"):
            assert f"[lumos:egglog] {rs:>12}:" in err
        assert "matches" in err and "e-nodes" in err


def test_rule_errors_surface_in_process_and_from_the_worker():
    bad = CORE + Rules(("(rule ((= a (Nope b))) ())",), ())
    g = long_sum(2)
    for budget in (Budget(), Budget(time_limit=30)):
        with pytest.raises(Exception, match="Unbound function Nope"):
            build_spaces(g, rules=bad, budget=budget)
        check_runs(g, build_spaces(g, budget=budget)[0])  # and the next build works
