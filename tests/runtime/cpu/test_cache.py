"""The artifact cache of CpuRuntime.compile: a compile saves its choices under
$LUMOS_CACHE/artifacts/, a later compile of the same graph and options (in any process)
loads them without saturating or searching; damaged artifacts are recompiled, failed
compiles save nothing, and `cache=False` neither reads nor writes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lumos
from lumos.artifact import Artifact, load_artifact
from lumos.runtime.cpu import CpuRuntime
from lumos.runtime.cpu import program as program_module
from lumos.runtime.cpu import tune as tune_module
from lumos.runtime.reference import run_hlir
from lumos.search import CompileOptions, SearchError
from tests.runtime.cpu.common import BASELINE, assert_same

ROOT = Path(__file__).resolve().parents[3]
SEARCH = CompileOptions(limit=2, generation_size=2, trials=1, execution_timeout=5)

# compiles `graph(scale)` (with a search over two buckets of n unless argv[1] is "none")
# and prints whether it saturated, the libraries and the outputs at n = 1 and n = 5
CHILD = """
import json, sys
import numpy as np
import lumos
from lumos.runtime.cpu import CpuRuntime
from lumos.runtime.cpu import program as program_module
from lumos.runtime.cpu import tune as tune_module
from lumos.search import CompileOptions, SearchError
from tests.runtime.cpu.test_cache import feeds, graph

saturated = []
real = program_module.build_spaces
program_module.build_spaces = lambda *a, **k: saturated.append(1) or real(*a, **k)
g, x, y = graph(2.0)
opts = CompileOptions(limit=0) if sys.argv[1] == "none" else CompileOptions(
    limit=2, generation_size=2, trials=1, dim_buckets={"n": [(1, 1, 1), (2, 64, 8)]})
prog = g.compile(CpuRuntime(), opts)
outs = []
for n in (1, 5):
    prog.set_data(x, feeds(n))
    prog.execute()
    outs.append(prog.get(y).tolist())
print(json.dumps({"saturated": len(saturated), "outs": outs,
                  "libraries": [str(p.library) for p in prog.programs]}))
"""


def graph(scale: float) -> tuple[lumos.Graph, lumos.Tensor, lumos.Tensor]:
    g = lumos.Graph()
    n = g.dim("n", 1, 64)
    x = g.tensor((n, 8), lumos.f32, "x")
    y = ((x * scale + 1) * (x + 3)).sum(1).output()  # commutations give alternatives
    return g, x, y


def feeds(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache with artifacts on; returns its artifacts folder."""
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path))
    monkeypatch.delenv("LUMOS_ARTIFACTS", raising=False)
    return tmp_path / "artifacts"


@pytest.fixture
def saturations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per saturation (build_spaces call) from now on."""
    calls: list[int] = []
    real = program_module.build_spaces
    monkeypatch.setattr(program_module, "build_spaces",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def child(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=ROOT, env=dict(os.environ),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def check(prog: lumos.runtime.base.Program, x: lumos.Tensor, y: lumos.Tensor) -> None:
    for n in (1, 5):
        prog.set_data(x, feeds(n))
        prog.execute()
        want, = run_hlir(prog.graph, {"x": feeds(n)}, {"n": n})
        assert_same(prog.get(y), want, lumos.f32, exact=False)


@pytest.mark.parametrize("mode", ["none", "search"])
def test_a_fresh_process_loads_the_artifact(cache: Path, mode: str) -> None:
    first, second = child(mode), child(mode)
    assert first["saturated"] == 1 and second["saturated"] == 0
    assert len(list(cache.glob("*.lar"))) == 1
    assert second["libraries"] == first["libraries"]  # the same generated source
    assert len(first["libraries"]) == (1 if mode == "none" else 2)
    assert second["outs"] == first["outs"]
    g, _, _ = graph(2.0)
    for n, got in zip((1, 5), first["outs"], strict=True):
        want, = run_hlir(g, {"x": feeds(n)}, {"n": n})
        assert_same(np.array(got, np.float32), want, lumos.f32, exact=False)


def test_another_graph_or_options_miss(cache: Path, saturations: list[int],
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LUMOS_LOG", "cache")
    for scale in (2.0, 3.0, 2.0):
        g, x, y = graph(scale)
        check(g.compile(CpuRuntime(), BASELINE), x, y)
    assert len(saturations) == 2 and len(list(cache.glob("*.lar"))) == 2
    g, x, y = graph(2.0)
    check(g.compile(CpuRuntime(), SEARCH), x, y)  # searched: not the baseline's artifact
    assert len(saturations) == 3 and len(list(cache.glob("*.lar"))) == 3
    err = capsys.readouterr().err
    assert err.count("saved compiled program") == 3 and err.count("loaded compiled program") == 1


def test_a_corrupted_artifact_warns_and_is_recompiled(cache: Path, saturations: list[int],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    g, x, y = graph(2.0)
    g.compile(CpuRuntime(), BASELINE)
    path, = cache.glob("*.lar")
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    capsys.readouterr()
    check(g.compile(CpuRuntime(), BASELINE), x, y)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corrupted (checksum mismatch); compiling again" in err[0]
    assert len(saturations) == 2
    g.compile(CpuRuntime(), BASELINE)  # the rewritten artifact loads
    assert len(saturations) == 2 and capsys.readouterr().err == ""


def test_a_failed_compile_saves_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, searched = tune_module.tune, []

    def tune(*args, **kwargs):  # the second bucket's search fails
        searched.append(1)
        if len(searched) == 2:
            raise SearchError("injected failure")
        return real(*args, **kwargs)
    monkeypatch.setattr(tune_module, "tune", tune)
    g, _, _ = graph(2.0)
    opts = dataclasses.replace(SEARCH, dim_buckets={"n": [(1, 1, 1), (2, 64, 8)]})
    with pytest.raises(SearchError, match="injected failure"):
        g.compile(CpuRuntime(), opts)
    assert len(searched) == 2 and not cache.exists()


def test_cache_off_neither_reads_nor_writes(cache: Path, saturations: list[int],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    g, x, y = graph(2.0)
    off = CompileOptions(limit=2, generation_size=2, trials=1, execution_timeout=5, cache=False)
    check(g.compile(CpuRuntime(), off), x, y)
    assert not cache.exists()
    g.compile(CpuRuntime(), SEARCH)
    path, = cache.glob("*.lar")
    saved = path.read_bytes()
    check(g.compile(CpuRuntime(), off), x, y)
    monkeypatch.setenv("LUMOS_ARTIFACTS", "off")
    g.compile(CpuRuntime(), SEARCH)
    assert len(saturations) == 4 and path.read_bytes() == saved
    assert isinstance(load_artifact(path, program_module.graph_fingerprint(g),
                                    program_module.signature(CpuRuntime.rules, SEARCH)), Artifact)


def test_saturation_cut_short_by_its_time_limit_is_not_cached(
        cache: Path, saturations: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    """A space the clock cut short depends on the machine's load: its program runs, but
    is not kept as the compiled program for every later run."""
    g, x, y = graph(2.0)
    hurried = dataclasses.replace(BASELINE, saturation_time_limit=1e-9)
    for _ in range(2):
        check(g.compile(CpuRuntime(), hurried), x, y)
    assert len(saturations) == 2 and not cache.exists()
    err = capsys.readouterr().err
    assert err.count("the compiled program is not cached: saturation ran past its time "
                     "limit") == 2
    g.compile(CpuRuntime(), BASELINE)
    assert len(list(cache.glob("*.lar"))) == 1


OFF_CHILD = """
import os, sys
import numpy as np
import lumos
from lumos.paths import cache_root
from lumos.runtime.cpu import CpuRuntime
from lumos.search import CompileOptions
g = lumos.Graph()
x = g.tensor((8, 33), name="x")
y = ((x * 2 + 1).exp().sum(1)).output()
prog = g.compile(CpuRuntime(), CompileOptions(limit=3, trials=1))
a = np.random.default_rng(0).standard_normal((8, 33)).astype(np.float32)
prog.set_data(x, a)
prog.execute()
assert np.allclose(prog.get(y), np.exp(a * 2 + 1).sum(1), rtol=1e-5)
print(cache_root())
print(sorted(p.name for p in cache_root().iterdir()))
"""


def test_lumos_cache_off_keeps_nothing(tmp_path):
    """LUMOS_CACHE=off: the kernels compile into a directory of the process's own (its
    sandbox's children use it too), gone when it exits; no artifact or verdict is
    written, and no directory named "off" appears where it ran."""
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, LUMOS_CACHE="off", HOME=str(home),
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    env.pop("LUMOS_ARTIFACTS", None)
    env.pop("LUMOS_CACHE_OFF_DIR", None)
    out = subprocess.run([sys.executable, "-c", OFF_CHILD], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    where, names = out.stdout.splitlines()[-2:]
    assert names == "['cpu']"  # (no artifacts/, no search.sqlite)
    assert not Path(where).exists()
    assert not (tmp_path / "off").exists() and list(home.iterdir()) == []
