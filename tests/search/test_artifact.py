import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import lumos
from lumos.artifact import (
    Artifact,
    ArtifactError,
    BucketChoice,
    apply_choices,
    choices_of,
    graph_fingerprint,
    load_artifact,
    save_artifact,
)
from lumos.search import Genomes, extract
from tests.search.spaces import build_graph, graph_space

ROOT = Path(__file__).resolve().parents[2]
SIG = {"runtime": "test", "cc": "gcc 12", "flags": "-O3"}

CHILD = """
import json, sys
import lumos
from lumos.artifact import apply_choices, graph_fingerprint, load_artifact
from lumos.search import Genomes, extract
from tests.search.spaces import build_graph, graph_space

g = build_graph()
art = load_artifact(sys.argv[1], graph_fingerprint(g), json.loads(sys.argv[2]))
b = art.buckets[0]
space = graph_space(g, reverse=True)  # a fresh space: same keys, other class ids
genome = apply_choices(space, b.choices)
assert [(n.op, n.fields) for _, n in extract(space, genome)] == \\
    [(n.op, n.fields) for _, n in b.program]
exp = next(n for _, n in b.program if n.op == "Exp2")
assert exp.fields[1] is lumos.f32 and exp.fields[0][0] is lumos.sym("s")
print(json.dumps({"graph": graph_fingerprint(g), "program": Genomes(space).fingerprint(genome),
                  "ops": [n.op for _, n in b.program], "bucket": b.bucket,
                  "blobs": {k: v.hex() for k, v in art.blobs.items()}}))
"""


def swapped_genome(space):
    """Not the baseline: every Mul with swapped operands."""
    gs = Genomes(space)
    pick = {c: len(alts) - 1 for c, alts in enumerate(space.classes)}
    return gs.repair(pick, random.Random(0))


@pytest.fixture
def saved(tmp_path):
    g = build_graph()
    space = graph_space(g)
    genome = swapped_genome(space)
    art = Artifact(graph_fingerprint(g), SIG, [BucketChoice.of(space, genome, {"s": (1, 64, 32)})],
                   blobs={"kernels.so": b"\x7fELF\x00\x01"})
    path = tmp_path / "cache" / "model.lumos"
    save_artifact(path, art)
    return path, g, space, genome


def test_round_trip_in_a_fresh_process(saved):
    path, g, space, genome = saved
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(SIG)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["graph"] == graph_fingerprint(g)
    assert got["program"] == Genomes(space).fingerprint(genome)
    assert got["ops"].count("MulSwapped") == 2 and got["ops"][-1] == "Root"
    assert got["bucket"] == {"s": [1, 64, 32]} and got["blobs"] == {"kernels.so": "7f454c460001"}


def test_graph_fingerprint_follows_structure():
    base = graph_fingerprint(build_graph())
    assert base == graph_fingerprint(build_graph())

    def variant(dtype=lumos.f32, n=4, flip=False):
        g = lumos.Graph()
        a = g.tensor(("s", n), dtype, name="a")
        (a.flip(1) if flip else a).exp().output()
        return graph_fingerprint(g)

    fps = {variant(), variant(lumos.f64), variant(n=5), variant(flip=True)}
    assert len(fps) == 4 and base not in fps


def test_damaged_files_are_refused(saved, tmp_path):
    path, g, _, _ = saved
    data = path.read_bytes()
    cases = {"corrupted": data[:-3] + bytes([data[-3] ^ 1]) + data[-2:],
             "truncated or padded": data[:-10],
             "truncated: 20 bytes": data[:20],
             "not a lumos artifact": b"PK\x03\x04" + data[4:]}
    for message, bad in cases.items():
        p = tmp_path / "bad.lumos"
        p.write_bytes(bad)
        with pytest.raises(ArtifactError, match=message):
            load_artifact(p, graph_fingerprint(g), SIG)
    with pytest.raises(ArtifactError, match="cannot read artifact"):
        load_artifact(tmp_path / "missing.lumos", graph_fingerprint(g), SIG)


def test_mismatched_graph_or_runtime_is_refused(saved):
    path, g, _, _ = saved
    other = lumos.Graph()
    other.tensor((2,), name="x").exp().output()
    with pytest.raises(ArtifactError, match="another graph"):
        load_artifact(path, graph_fingerprint(other), SIG)
    with pytest.raises(ArtifactError, match="cc: 'gcc 12' in the artifact, 'clang 17' now"):
        load_artifact(path, graph_fingerprint(g), SIG | {"cc": "clang 17"})
    save_artifact(path, Artifact(graph_fingerprint(g), "v2", []))
    with pytest.raises(ArtifactError, match="signature 'v2' in the artifact, 'v3' now"):
        load_artifact(path, graph_fingerprint(g), "v3")


def test_choices_that_do_not_fit_the_space_are_refused():
    space = graph_space(build_graph())
    genome = swapped_genome(space)
    choices = choices_of(space, genome)
    assert apply_choices(graph_space(build_graph(), reverse=True), choices) != genome
    assert extract(space, apply_choices(space, choices)) == extract(space, genome)
    key = next(iter(choices))
    with pytest.raises(ArtifactError, match=f"no entry for e-class '{key}'"):
        apply_choices(space, {k: v for k, v in choices.items() if k != key})
    with pytest.raises(ArtifactError, match=f"e-class '{key}' has no alternative 'nope'"):
        apply_choices(space, choices | {key: "nope"})
    space.class_keys = []
    with pytest.raises(ArtifactError, match="no stable e-class keys"):
        apply_choices(space, choices)
