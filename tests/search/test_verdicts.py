"""Search verdicts kept across compiles (search.verdicts): a second search of the same
kernels decides their moves from the first's verdicts, reaching the same program in fewer
candidates; a store that is off, corrupt or unwritable is no store, never an error."""

from __future__ import annotations

import numpy as np
import pytest

import lumos
from lumos.record import recording
from lumos.runtime.cpu import CpuRuntime
from lumos.runtime.cpu import program as program_module
from lumos.search import CompileOptions, KernelSearch
from lumos.search.verdicts import Verdicts, store_path
from tests.search.spaces import grid_space
from tests.search.test_local import as_kernels, drive, random_costs


def test_a_second_search_of_the_same_kernels_times_no_new_move():
    space = as_kernels(grid_space(8, 4))
    cost = random_costs(space, 0)
    first = KernelSearch(space, CompileOptions(limit=100))
    drive(first, space, cost)
    learned = first.learned()
    assert learned and any(learned.values()) and not all(learned.values())
    again = KernelSearch(space, CompileOptions(limit=100), known=learned)
    seen = drive(again, space, cost)
    assert again.best()[1] == pytest.approx(first.best()[1])
    assert again.recalled and again.learned() == {}  # nothing it did not know
    # generation 0 (one baseline), the kept moves (batched), the finals (if it moved)
    assert len(seen) < len(first.history)
    # with no verdicts it searches as the first did
    fresh = KernelSearch(space, CompileOptions(limit=100), known={})
    assert len(drive(fresh, space, cost)) == len(first.history)


def test_the_store_keeps_verdicts_per_condition(tmp_path):
    a, b = (Verdicts(f"machine {m}", tmp_path / "v.sqlite") for m in "ab")
    a.save({"s1": True, "s2": False})
    b.save({"s1": False})
    a.save({"s2": True})  # a later verdict replaces the earlier
    assert a.load() == {"s1": True, "s2": True} and b.load() == {"s1": False}


def test_a_store_that_is_off_corrupt_or_unwritable_is_none(tmp_path, monkeypatch):
    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(b"not a database" * 100)
    store = Verdicts("m", bad)
    assert store.load() == {}
    store.save({"s": True})  # (no error)
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        Verdicts("m", locked / "sub" / "v.sqlite").save({"s": True})
        assert Verdicts("m", locked / "sub" / "v.sqlite").load() == {} or \
            (locked / "sub").exists()  # (root may write anyway)
    finally:
        locked.chmod(0o700)
    monkeypatch.setenv("LUMOS_CACHE", "off")
    assert store_path() is None and Verdicts("m").load() == {}
    Verdicts("m").save({"s": True})
    assert not (tmp_path / "off").exists()


def test_a_second_compile_starts_from_the_verdicts_the_first_measured(tmp_path, monkeypatch):
    """What the second search then does with them depends on the machine's timings (the
    path from its incumbent may meet other moves): the search test above pins that. On a
    busy machine the first search may keep no verdict at all (every move within the
    noise): then the pair of compiles is tried again in a fresh cache, three times at most."""
    for tries in range(3):
        monkeypatch.setenv("LUMOS_CACHE", str(tmp_path / str(tries)))  # (artifacts are off)
        if _two_compiles(monkeypatch, last=tries == 2):
            return


def _two_compiles(monkeypatch, last: bool) -> bool:
    """The same graph compiled twice; False where the first search learned nothing and
    this is not the `last` try."""
    searches = []

    class Recorded(KernelSearch):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            searches.append(self)
    monkeypatch.setattr(program_module, "KernelSearch", Recorded)
    g = lumos.Graph()
    x = g.tensor((64, 48), name="x")
    w = g.tensor((48, 32), name="w")
    y = ((x @ w).softmax(-1) * 2.0 + (x * x).sum(1, keepdim=True)).output()
    opts = CompileOptions(limit=30, trials=1)
    records = []
    for _ in range(2):
        with recording() as rec:
            prog = g.compile(CpuRuntime(), opts)
        records.append(rec.compiles[-1].buckets[0])
        rng = np.random.default_rng(0)
        xs, ws = rng.standard_normal((64, 48), np.float32), rng.standard_normal((48, 32),
                                                                               np.float32)
        prog.set_data(x, xs)
        prog.set_data(w, ws)
        prog.execute()
        z = xs @ ws
        e = np.exp(z - z.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True) * 2 + (xs * xs).sum(1, keepdims=True)
        np.testing.assert_allclose(prog.get(y), want, rtol=1e-4, atol=1e-4)
    first, second = searches
    learned = first.learned()
    if not learned and not last:
        return False
    assert learned and first._known == {} and records[0].recalled == 0
    assert second._known == learned  # all the first measured, and only that
    assert records[1].learned == len(second.learned())
    store = Verdicts(program_module.measured_under([{}])).load()
    assert store == {**learned, **second.learned()}
    return True
