"""Artifacts: compiled programs' choices saved to one file, so loading skips saturation
and search, and a file can be shipped to another machine of the same runtime signature.

An artifact holds the graph fingerprint, the runtime signature, and per dim bucket the
chosen e-node of every reachable e-class (by stable keys: `space.class_keys` and
`space.enode_key`, never egglog ids) together with the extracted program, plus named
blobs (a runtime's compiled kernels). One file holds one or more artifacts (the graphs
of one model) and a `meta` dict (what made it, e.g. `lumos compile`'s arguments).

File layout: MAGIC, sha256 of the body, body length and JSON length (8 bytes each,
big-endian), then the body: UTF-8 JSON, then the blobs' bytes in the order the JSON lists
them, each with its own size and sha256. The JSON is plain data (e-node fields as tagged
values: tuples, floats by their hex, expressions, views, dtypes): reading a file runs no
code of it; the only code a file carries are the kernels its blobs name, which the
runtime loads only after every check passed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lumos.dtype import DType, as_dtype
from lumos.egraph.space import ENode, SearchSpace
from lumos.errors import LumosError
from lumos.graph import Graph
from lumos.search.genome import Genome, SearchError, extract
from lumos.search.options import Bucket
from lumos.shape import Expr, View
from lumos.shape.expr import _BINARY, _rebuild

MAGIC = b"LUMOSAR2"  # the trailing digit is the format version
_HEADER = len(MAGIC) + 32 + 8 + 8


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
        return BucketChoice({d: tuple(b) for d, b in bucket.items()},  # type: ignore[misc]
                            choices_of(space, genome), extract(space, genome))


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


# -- the file ------------------------------------------------------------------------------

def save_artifact(path: str | os.PathLike, artifact: Artifact) -> None:
    """Write one artifact to `path` atomically (a reader sees the old file or the new)."""
    write_artifacts(path, [artifact])


def write_artifacts(path: str | os.PathLike, artifacts: Sequence[Artifact],
                    meta: Mapping[str, Any] | None = None) -> None:
    """Write `artifacts` and `meta` (JSON data) to `path` atomically."""
    blobs: list[bytes] = []
    docs = []
    for a in artifacts:
        docs.append({"graph": a.graph, "runtime": a.runtime,
                     "buckets": [_bucket_doc(b) for b in a.buckets],
                     "blobs": [{"name": k, "size": len(v), "sha256": hashlib.sha256(v).hexdigest()}
                               for k, v in a.blobs.items()]})
        blobs.extend(a.blobs.values())
    text = json.dumps({"meta": dict(meta or {}), "artifacts": docs}, allow_nan=False,
                      separators=(",", ":")).encode()
    body = text + b"".join(blobs)
    data = MAGIC + hashlib.sha256(body).digest() + len(body).to_bytes(8, "big") + \
        len(text).to_bytes(8, "big") + body
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, delete=False) as f:
        f.write(data)
    os.chmod(f.name, 0o644)  # (a temporary file is private; an artifact is to be shipped)
    os.replace(f.name, path)


def is_artifact(path: str | os.PathLike) -> bool:
    """Whether `path` is a file that starts as an artifact of this format."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def read_artifacts(path: str | os.PathLike) -> tuple[dict[str, Any], list[Artifact]]:
    """(meta, artifacts) of a file, refusing one that is unreadable, of another format,
    truncated, corrupted or malformed (ArtifactError, one line naming the file)."""
    where = repr(str(path))
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ArtifactError(f"cannot read artifact {where}: {e.strerror or e}") from e
    if not data.startswith(MAGIC):
        old = data.startswith(MAGIC[:-1])
        raise ArtifactError(f"{where} is not a lumos artifact of this version (expected header "
                            f"{MAGIC!r}{'; an older format: compile again' if old else ''})")
    if len(data) < _HEADER:
        raise ArtifactError(f"artifact {where} is truncated: {len(data)} bytes, shorter than "
                            f"its {_HEADER}-byte header")
    digest, at = data[len(MAGIC):len(MAGIC) + 32], len(MAGIC) + 32
    size, text_size = (int.from_bytes(data[at + k:at + k + 8], "big") for k in (0, 8))
    body = data[_HEADER:]
    if len(body) != size:
        raise ArtifactError(f"artifact {where} is truncated or padded: {len(body)} body "
                            f"bytes, the header says {size}")
    if hashlib.sha256(body).digest() != digest:
        raise ArtifactError(f"artifact {where} is corrupted (checksum mismatch)")
    try:
        doc = json.loads(body[:text_size].decode(), parse_constant=_no_constant)
        meta, arts, offset = doc["meta"], [], text_size
        for a in doc["artifacts"]:
            blobs = {}
            for b in a["blobs"]:
                blob = body[offset:offset + b["size"]]
                offset += b["size"]
                if len(blob) != b["size"] or hashlib.sha256(blob).hexdigest() != b["sha256"]:
                    raise ArtifactError(f"artifact {where}: blob {b['name']!r} does not match "
                                        "its checksum")
                blobs[str(b["name"])] = blob
            arts.append(Artifact(str(a["graph"]), a["runtime"],
                                 [_bucket_of(b) for b in a["buckets"]], blobs))
        if offset != size or not isinstance(meta, dict):
            raise ValueError("blob sizes do not add up to the body")
    except ArtifactError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise ArtifactError(f"artifact {where} cannot be decoded: "
                            f"{type(e).__name__}: {e}") from None
    return meta, arts


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The `meta` of an artifact file (after every check of `read_artifacts`)."""
    return read_artifacts(path)[0]


def load_artifact(path: str | os.PathLike, graph: str, runtime: Any,
                  ignore: Sequence[str] = ()) -> Artifact:
    """The artifact for graph fingerprint `graph` in the file at `path`, refusing a file
    that is damaged, holds no artifact for that graph, or was made for another runtime
    signature (`runtime`; the keys in `ignore` of a dict signature are not compared)."""
    arts = read_artifacts(path)[1]
    where = repr(str(path))
    mine = [a for a in arts if a.graph == graph]
    if not mine:
        saved = ", ".join(f"{a.graph[:16]}..." for a in arts) or "none"
        raise ArtifactError(f"artifact {where} was compiled for another graph (graph "
                            f"fingerprints {saved}; this graph is {graph[:16]}...)")
    art = mine[0]
    if _compared(art.runtime, ignore) != _compared(runtime, ignore):
        raise ArtifactError(f"artifact {where} was compiled for another runtime: "
                            f"{_signature_diff(art.runtime, runtime, ignore)}")
    return art


def _compared(signature: Any, ignore: Sequence[str]) -> Any:
    if isinstance(signature, Mapping):
        return {k: v for k, v in signature.items() if k not in ignore}
    return signature


def _signature_diff(saved: Any, now: Any, ignore: Sequence[str] = ()) -> str:
    if isinstance(saved, Mapping) and isinstance(now, Mapping):
        keys = sorted((k for k in saved.keys() | now.keys()
                       if k not in ignore and saved.get(k) != now.get(k)), key=str)
        return "; ".join(f"{k}: {saved.get(k)!r} in the artifact, {now.get(k)!r} now"
                         for k in keys)
    return f"signature {saved!r} in the artifact, {now!r} now"


def _check_keys(space: SearchSpace) -> None:
    if len(space.class_keys) != len(space.classes):
        raise ArtifactError("the search space has no stable e-class keys (class_keys); its "
                            "choices cannot be saved or re-applied")


# -- e-node fields as JSON data -------------------------------------------------------------

def _no_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON constant {name}")


def _bucket_doc(b: BucketChoice) -> dict[str, Any]:
    return {"bucket": {d: list(v) for d, v in b.bucket.items()}, "choices": b.choices,
            "program": [[c, n.op, [encode(f) for f in n.fields], list(n.children)]
                        for c, n in b.program]}


def _bucket_of(doc: Mapping[str, Any]) -> BucketChoice:
    bucket = {str(d): (int(v[0]), None if v[1] is None else int(v[1]), int(v[2]))
              for d, v in doc["bucket"].items()}
    program = [(int(c), ENode(str(op), tuple(decode(f) for f in fields),
                              tuple(int(k) for k in kids)))
               for c, op, fields, kids in doc["program"]]
    return BucketChoice(bucket, {str(k): str(v) for k, v in doc["choices"].items()}, program)


def encode(v: Any) -> Any:
    """An e-node field as JSON data: str, int, bool and None as themselves; a float as
    {"f": hex}; a tuple {"t": [...]}; an Expr {"x": [op, args]}; a View {"v": [shape,
    index, valid]}; a DType {"d": name}."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return {"f": float.hex(v)}
    if isinstance(v, tuple):
        return {"t": [encode(x) for x in v]}
    if isinstance(v, Expr):
        if v.op in ("num", "var"):
            return {"x": [v.op, list(v.args)]}
        if v.op == "sum":
            return {"x": ["sum", [[[encode(m) for m in mono], c] for mono, c in v.args]]}
        return {"x": [v.op, [encode(a) for a in v.args]]}
    if isinstance(v, View):
        return {"v": [encode(v.shape), encode(v.index), encode(v.valid)]}
    if isinstance(v, DType):
        return {"d": v.name}
    raise ArtifactError(f"an e-node field of type {type(v).__name__} cannot be saved: {v!r}")


def decode(v: Any) -> Any:
    """The inverse of `encode`; raises ValueError on anything it does not write."""
    if v is None or isinstance(v, bool | str | int):
        return v
    if not isinstance(v, dict) or len(v) != 1:
        raise ValueError(f"not an encoded field: {v!r}")
    (tag, x), = v.items()
    if tag == "f":
        return float.fromhex(x)
    if tag == "t":
        return tuple(decode(a) for a in x)
    if tag == "d":
        return as_dtype(x)
    if tag == "v":
        shape, index, valid = (decode(a) for a in x)
        if not (isinstance(shape, tuple) and all(isinstance(e, Expr) for e in (*shape, index,
                                                                               valid))):
            raise ValueError(f"malformed view {x!r}")
        return View(shape, index, valid)
    if tag == "x":
        op, args = x
        if op == "num" and isinstance(args[0], int) and not isinstance(args[0], bool):
            return _rebuild(op, (int(args[0]),))
        if op == "var" and isinstance(args[0], str):
            return _rebuild(op, (args[0],))
        if op == "sum":
            return _rebuild(op, tuple((tuple(_expr(m) for m in mono), int(c))
                                      for mono, c in args))
        if op in _BINARY:
            a, b = (_expr(e) for e in args)
            return _rebuild(op, (a, b))
        raise ValueError(f"unknown expression {op!r}")
    raise ValueError(f"unknown field tag {tag!r}")


def _expr(v: Any) -> Expr:
    e = decode(v)
    if not isinstance(e, Expr):
        raise ValueError(f"not an expression: {v!r}")
    return e
