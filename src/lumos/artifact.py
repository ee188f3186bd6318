"""Artifacts: a compiled program's choices saved to one file, so loading skips saturation
and search.

An artifact holds the graph fingerprint, the runtime signature, and per dim bucket the
chosen e-node of every reachable e-class (by stable keys: `space.class_keys` and
`space.enode_key`, never egglog ids) together with the extracted program, plus optional
named blobs (compiled kernels). File layout: MAGIC, sha256 of the payload, payload length
(8 bytes, big-endian), payload. The payload is a pickle: artifacts are trusted local cache
files, like compiled code; never load one from an untrusted source.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lumos.egraph.space import ENode, SearchSpace
from lumos.errors import LumosError
from lumos.graph import Graph
from lumos.search.genome import Genome, SearchError, extract
from lumos.search.options import Bucket

MAGIC = b"LUMOSAR1"  # the trailing digit is the format version
_HEADER = len(MAGIC) + 32 + 8


class ArtifactError(LumosError):
    """An artifact that cannot be used: unreadable, corrupted, or made for another graph,
    runtime or e-graph."""


@dataclass
class BucketChoice:
    bucket: dict[str, Bucket]  # dim -> (min, max, representative); {} for static shapes
    choices: dict[str, str]    # e-class key -> chosen e-node key
    program: list[tuple[int, ENode]]  # extract(space, genome): children first

    @staticmethod
    def of(space: SearchSpace, genome: Genome, bucket: Mapping[str, Bucket]) -> BucketChoice:
        return BucketChoice(dict(bucket), choices_of(space, genome), extract(space, genome))


@dataclass
class Artifact:
    graph: str    # graph_fingerprint(graph)
    runtime: Any  # the runtime's signature (compiler, flags, device): a str or a dict
    buckets: list[BucketChoice]
    blobs: dict[str, bytes] = field(default_factory=dict)


def graph_fingerprint(graph: Graph) -> str:
    """sha256 over the graph's structure (every node's op, inputs, views, shape, dtype and
    fields; the outputs; the dims), the same in every process."""
    def exprs(es: tuple) -> tuple[str, ...]:
        return tuple(e.key() for e in es)

    h = hashlib.sha256()
    for n in graph.nodes:
        views = tuple((exprs(v.shape), v.index.key(), v.valid.key()) for v in n.views)
        h.update(repr((n.op, n.inputs, views, exprs(n.shape), n.dtype.name, n.name, n.value,
                       n.axis, n.expr.key() if n.expr is not None else None,
                       n.persist)).encode() + b"\n")
    h.update(repr((graph.outputs, sorted(graph.dims.items()))).encode())
    return h.hexdigest()


def choices_of(space: SearchSpace, genome: Genome) -> dict[str, str]:
    """A genome as stable names: e-class key -> chosen e-node key."""
    _check_keys(space)
    out: dict[str, str] = {}
    for c, i in genome.items():
        key, choice = space.class_keys[c], space.enode_key(c, i)
        if out.setdefault(key, choice) != choice:
            raise ArtifactError(f"two e-classes share the key {key!r}; choices cannot be named")
    return out


def apply_choices(space: SearchSpace, choices: Mapping[str, str]) -> Genome:
    """Saved choices re-applied to a freshly saturated space: the genome they name."""
    _check_keys(space)
    genome: Genome = {}
    stack = [space.root]
    while stack:
        c = stack.pop()
        if c in genome:
            continue
        key = space.class_keys[c]
        if key not in choices:
            raise ArtifactError(f"the saved choices have no entry for e-class {key!r}: the "
                                "e-graph differs from the one searched (rules or lumos "
                                "version changed); recompile")
        i = next((i for i in range(len(space.classes[c]))
                  if space.enode_key(c, i) == choices[key]), None)
        if i is None:
            raise ArtifactError(f"e-class {key!r} has no alternative {choices[key]!r}: the "
                                "e-graph differs from the one searched; recompile")
        genome[c] = i
        stack.extend(space.classes[c][i].children)
    try:
        extract(space, genome)
    except SearchError as e:
        raise ArtifactError(f"the saved choices do not form a program: {e}") from e
    return genome


def save_artifact(path: str | os.PathLike, artifact: Artifact) -> None:
    """Write `artifact` to `path` atomically (a reader sees the old file or the new one)."""
    payload = pickle.dumps(artifact, protocol=pickle.HIGHEST_PROTOCOL)
    data = MAGIC + hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "big") + payload
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, delete=False) as f:
        f.write(data)
    os.replace(f.name, path)


def load_artifact(path: str | os.PathLike, graph: str, runtime: Any) -> Artifact:
    """Read an artifact, refusing one that is damaged or made for another graph
    fingerprint (`graph`) or runtime signature (`runtime`)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ArtifactError(f"cannot read artifact {str(path)!r}: {e}") from e
    if not data.startswith(MAGIC):
        raise ArtifactError(f"{str(path)!r} is not a lumos artifact of this version "
                            f"(expected header {MAGIC!r})")
    if len(data) < _HEADER:
        raise ArtifactError(f"artifact {str(path)!r} is truncated: {len(data)} bytes, "
                            f"shorter than its {_HEADER}-byte header")
    digest = data[len(MAGIC):_HEADER - 8]
    size, payload = int.from_bytes(data[_HEADER - 8:_HEADER], "big"), data[_HEADER:]
    if len(payload) != size:
        raise ArtifactError(f"artifact {str(path)!r} is truncated or padded: "
                            f"{len(payload)} payload bytes, the header says {size}")
    if hashlib.sha256(payload).digest() != digest:
        raise ArtifactError(f"artifact {str(path)!r} is corrupted (checksum mismatch)")
    try:
        art = pickle.loads(payload)
    except Exception as e:
        raise ArtifactError(f"artifact {str(path)!r} cannot be decoded: {e}") from e
    if not isinstance(art, Artifact):
        raise ArtifactError(f"{str(path)!r} does not hold an Artifact")
    if art.graph != graph:
        raise ArtifactError(f"artifact {str(path)!r} was compiled for another graph "
                            f"(graph fingerprint {art.graph[:16]}..., this graph is "
                            f"{graph[:16]}...)")
    if art.runtime != runtime:
        raise ArtifactError(f"artifact {str(path)!r} was compiled for another runtime: "
                            f"{_signature_diff(art.runtime, runtime)}")
    return art


def _signature_diff(saved: Any, now: Any) -> str:
    if isinstance(saved, Mapping) and isinstance(now, Mapping):
        keys = sorted((k for k in saved.keys() | now.keys() if saved.get(k) != now.get(k)),
                      key=str)
        return "; ".join(f"{k}: {saved.get(k)!r} in the artifact, {now.get(k)!r} now"
                         for k in keys)
    return f"signature {saved!r} in the artifact, {now!r} now"


def _check_keys(space: SearchSpace) -> None:
    if len(space.class_keys) != len(space.classes):
        raise ArtifactError("the search space has no stable e-class keys (class_keys); its "
                            "choices cannot be saved or re-applied")
