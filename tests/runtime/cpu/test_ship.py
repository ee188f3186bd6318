"""Shipped artifacts (lumos.runtime.cpu.ship): a program searched once, written with its
libraries to one file, loads in another process with an empty cache (nothing saturated,
searched or compiled) and computes what the reference does; a tampered, truncated or
other-signature file, one of the old pickle format, and one for another graph are each
refused with one line; `recompile=True` compiles instead."""

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
from lumos.artifact import ArtifactError, read_artifacts, write_artifacts
from lumos.runtime.cpu import CpuRuntime
from lumos.runtime.reference import run_hlir
from lumos.search import CompileOptions

ROOT = Path(__file__).resolve().parents[3]
SEARCH = CompileOptions(limit=2, generation_size=2, trials=1, execution_timeout=5)

CHILD = """
import json, sys
import numpy as np
from lumos.runtime.cpu import CpuRuntime
from lumos.runtime.cpu import program as program_module
from tests.runtime.cpu.test_ship import SEARCH, feeds, graph

program_module.build_spaces = None  # loading must not saturate
g, x, y = graph()
prog = g.compile(CpuRuntime(artifacts=sys.argv[1]), SEARCH)
prog.set_data(x, feeds(5))
prog.execute()
print(json.dumps(prog.get(y).tolist()))
"""


def graph() -> tuple[lumos.Graph, lumos.Tensor, lumos.Tensor]:
    g = lumos.Graph()
    x = g.tensor(("n", 16), name="x")
    y = ((x * 2.0).exp() + x).sum(-1).output()
    return g, x, y


def feeds(n: int) -> np.ndarray:
    return np.linspace(-1, 1, n * 16, dtype=np.float32).reshape(n, 16)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    g, _, _ = graph()
    rt = CpuRuntime()
    g.compile(rt, SEARCH)
    path = tmp_path_factory.mktemp("ship") / "model.lar"
    rt.ship(path, {"made by": "test"})
    return path


def test_loads_in_a_fresh_process_without_compiling(shipped, tmp_path):
    env = dict(os.environ, LUMOS_CACHE=str(tmp_path / "empty"), CC="false")  # no compiler
    out = subprocess.run([sys.executable, "-c", CHILD, str(shipped)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    g, x, y = graph()
    want = run_hlir(g, {"x": feeds(5)}, {"n": 5})[0]
    np.testing.assert_allclose(json.loads(out.stdout), want, rtol=1e-5)
    assert not (tmp_path / "empty" / "cpu").exists()  # nothing compiled
    assert len(list((tmp_path / "empty" / "shipped").glob("*.so"))) == 1


def test_meta_and_blobs(shipped):
    meta, arts = read_artifacts(shipped)
    assert meta == {"made by": "test"} and len(arts) == 1
    (name, blob), = arts[0].blobs.items()
    assert name.startswith("0:") and blob.startswith(b"\x7fELF")


def refused(path: Path, g: lumos.Graph | None = None) -> str:
    g = g or graph()[0]
    with pytest.raises(ArtifactError) as e:
        g.compile(CpuRuntime(artifacts=path), SEARCH)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_damaged_or_foreign_files_are_refused(shipped, tmp_path):
    data = shipped.read_bytes()
    bad = tmp_path / "bad.lar"
    bad.write_bytes(data[:-100] + bytes([data[-100] ^ 0x40]) + data[-99:])  # in the library
    assert "corrupted (checksum mismatch)" in refused(bad)
    bad.write_bytes(data[:len(data) // 2])
    assert "truncated or padded" in refused(bad)
    bad.write_bytes(b"LUMOSAR1" + data[8:])  # the old, pickled format
    assert "not a lumos artifact of this version" in refused(bad)
    meta, arts = read_artifacts(shipped)
    arts[0].runtime = arts[0].runtime | {"cpu": "0123456789abcdef"}
    write_artifacts(bad, arts, meta)
    message = refused(bad)
    assert "another runtime: cpu: '0123456789abcdef' in the artifact" in message
    other = lumos.Graph()
    other.tensor((3,), name="z").exp().output()
    assert "compiled for another graph" in refused(shipped, other)


def test_a_tampered_program_is_refused(shipped, tmp_path):
    """Checksums recomputed by whoever edited it: a library is used only for the program
    whose C its name hashes (an edited constant, or another name, is refused)."""
    meta, arts = read_artifacts(shipped)
    prog = arts[0].buckets[0].program
    k, (c, n) = next((k, p) for k, p in enumerate(prog) if p[1].op == "Constant")
    prog[k] = (c, dataclasses.replace(n, fields=(*n.fields[:-1], "3.0")))
    bad = tmp_path / "edited.lar"
    write_artifacts(bad, arts, meta)
    assert "kernels are not the ones its program generates" in refused(bad)
    meta, arts = read_artifacts(shipped)
    arts[0].blobs = {"0:" + "0" * 64: next(iter(arts[0].blobs.values()))}
    write_artifacts(bad, arts, meta)
    assert "kernels are not the ones its program generates" in refused(bad)
    arts[0].blobs = {}
    write_artifacts(bad, arts, meta)
    assert "holds no kernels for bucket 0" in refused(bad)


def test_recompile_when_asked(tmp_path, capfd):
    g, x, y = graph()
    bad = tmp_path / "junk.lar"
    bad.write_bytes(b"junk")
    prog = g.compile(CpuRuntime(artifacts=bad, recompile=True), SEARCH)
    assert "not a lumos artifact" in capfd.readouterr().err
    prog.set_data(x, feeds(3))
    prog.execute()
    np.testing.assert_allclose(prog.get(y), run_hlir(g, {"x": feeds(3)}, {"n": 3})[0],
                               rtol=1e-5)
