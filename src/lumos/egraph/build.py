"""Graph -> one SearchSpace per dim-bucket combination: load the rules, insert the graph,
run the schedule under the interval facts of each combination, read back."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from lumos.egraph import worker
from lumos.egraph.encode import bound_facts, egg, fingerprints, insert_commands, span
from lumos.egraph.readback import read_space
from lumos.egraph.schedule import CORE, Budget, Rules, Runner, load
from lumos.egraph.space import SearchSpace
from lumos.graph import Graph
from lumos.logs import warn

Bounds = Mapping[str, tuple[int, int | None]]
NO_LIMITS = Budget()


def build_spaces(graph: Graph, all_bounds: Sequence[Bounds] = ({},), rules: Rules = CORE,
                 budget: Budget = NO_LIMITS) -> list[SearchSpace]:
    """One SearchSpace per entry of `all_bounds` (dim -> (min, max), overriding the
    declared ranges). With `budget.time_limit` saturation stops at the limit (checked
    between ruleset runs, then only the `required` stages run: a backend's lowering,
    without which it cannot execute), and the work runs in a child process that is killed
    at twice the limit (several entries: one child each, side by side where the CPU has
    the cores); then (with a warning) the spaces are the graph as given, with only the
    required stages run."""
    if budget.time_limit is None:
        return saturate(graph, all_bounds, rules, budget)
    limit = 2 * budget.time_limit
    try:
        if len(all_bounds) == 1 or (os.cpu_count() or 1) == 1:
            return worker.call(saturate, (graph, all_bounds, rules, budget), limit)
        # a worker per combination, side by side (egglog runs on one core: SmolLM2's two
        # buckets took 2 x 21 s of saturation one after the other)
        pool = ThreadPoolExecutor(min(len(all_bounds), os.cpu_count() or 1))
        try:
            parts = list(pool.map(lambda one: worker.call(saturate, (graph, [one], rules,
                                                                      budget), limit),
                                  all_bounds))
        except BaseException:  # one lost, or an interrupt: the others' children end too,
            worker.stop()      # so that their threads stop waiting on them
            raise
        finally:
            pool.shutdown()
        return [space for part in parts for space in part]
    except worker.Lost as e:
        warn(f"e-graph saturation {e}; the search space is the graph without rewrites "
             "(but for required stages: a backend's lowering)")
        required = tuple(st for st in rules.stages if st.required)
        return saturate(graph, all_bounds, Rules(rules.texts, required), budget)


def saturate(graph: Graph, all_bounds: Sequence[Bounds], rules: Rules,
             budget: Budget) -> list[SearchSpace]:
    """The in-process build, on an e-graph that has `rules` loaded (kept per thread and
    restored with push/pop; push/pop again around each bucket combination)."""
    b = egg()
    egraphs = _loaded.__dict__.setdefault("egraphs", {})
    if rules not in egraphs:
        eg = b.EGraph()
        egraphs[rules] = eg, load(eg, rules)
    eg, ctors = egraphs[rules]
    nested = len(all_bounds) > 1
    deadline = None if budget.time_limit is None else time.perf_counter() + budget.time_limit
    try:
        eg.run_program(b.Push(1))
        eg.run_program(*insert_commands(graph))
        fps = fingerprints(graph)
        spaces = []
        for bounds in all_bounds:
            if nested:
                eg.run_program(b.Push(1))
            eg.run_program(*bound_facts({**graph.dims, **bounds}))
            runner = Runner(eg, ctors, budget, deadline)
            runner.schedule(rules.stages)
            spaces.append(read_space(eg, ctors, fps))
            spaces[-1].saturation = runner.history
            spaces[-1].timed_out = runner.timed_out
            if nested:
                eg.run_program(b.Pop(span(), 1))
        eg.run_program(b.Pop(span(), 1))
    except BaseException:
        del egraphs[rules]  # in an unknown state: the next build starts afresh
        raise
    return spaces


_loaded = threading.local()  # egglog 13 e-graphs are bound to the thread that made them
