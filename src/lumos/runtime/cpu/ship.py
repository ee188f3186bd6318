"""Shipped artifacts of the CPU runtime: a compiled program's choices, program and shared
libraries in one file (lumos.artifact's format), written on one machine and loaded on
another of the same runtime signature without saturating, searching or compiling.

    rt = CpuRuntime(); prog = g.compile(rt, options); rt.ship("model.lar")
    prog = g.compile(CpuRuntime(artifacts="model.lar"), options)   # elsewhere

A library's blob is named `<bucket>:<sha256 of its C source>`; loading regenerates the
program's C from the saved choices (decision-free codegen) and uses a library only if
that source's hash is the one its name says, so a file cannot pair one program's layout
with another program's kernels. The C compiler is not compared (none is needed where an
artifact is loaded); the CPU, flags, OpenBLAS, rules, lumos sources and options are.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scipy_openblas32

from lumos.artifact import Artifact, ArtifactError, load_artifact, write_artifacts
from lumos.graph import Graph
from lumos.runtime.cpu.cc import cache_dir
from lumos.runtime.cpu.codegen import generate
from lumos.runtime.cpu.kernels import from_genome

if TYPE_CHECKING:
    from lumos.runtime.cpu.program import CompiledProgram

NOT_COMPARED = ("cc",)


def source_hash(units: Sequence[Any]) -> str:
    """sha256 of a program's C as compile_units joins it (its `<key>.c`)."""
    texts = [u if isinstance(u, str) else u[0] + u[1] for u in units]
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()


def ship(path: str | os.PathLike, compiled: Sequence[tuple[Artifact, Sequence[Path]]],
         meta: Mapping[str, Any] | None = None) -> None:
    """Write the artifacts of `compiled` (one per compile: the artifact and each bucket's
    library, its C source beside it) with their libraries; an artifact loaded from a
    shipped file keeps its blobs."""
    arts = []
    for art, libraries in compiled:
        blobs = dict(art.blobs)
        for k, lib in enumerate(libraries if not blobs else ()):
            try:
                text = lib.with_suffix(".c").read_bytes()
                blobs[f"{k}:{hashlib.sha256(text).hexdigest()}"] = lib.read_bytes()
            except OSError as e:
                raise ArtifactError(f"cannot ship {lib}: {e.strerror or e}") from e
        arts.append(Artifact(art.graph, art.runtime, art.buckets, blobs))
    if not arts:
        raise ArtifactError("nothing to ship: this runtime has compiled no program")
    write_artifacts(path, arts, meta)


def load(path: str | os.PathLike, graph: Graph, graph_fp: str, signature: Mapping[str, str],
         buckets: Sequence[Mapping[str, Any]],
         flush: bool) -> tuple[Artifact, list[CompiledProgram]]:
    """The artifact of `graph` in the shipped file and its programs, their libraries
    written under `$LUMOS_CACHE/shipped/`; ArtifactError (one line) if the file is damaged,
    has no program for this graph or these buckets, or another runtime signature."""
    from lumos.runtime.cpu.program import CompiledProgram, saved_space, weight_names

    where = repr(str(path))
    art = load_artifact(path, graph_fp, dict(signature), ignore=NOT_COMPARED)
    if [b.bucket for b in art.buckets] != [{d: tuple(v) for d, v in c.items()}
                                           for c in buckets]:
        raise ArtifactError(f"artifact {where} holds other dim buckets for this graph")
    by_bucket = {name.split(":", 1)[0]: (name, blob) for name, blob in art.blobs.items()}
    programs = []
    for k, b in enumerate(art.buckets):
        space = saved_space(b.program, Path(path))
        units, layout = generate(from_genome(space, [0] * len(space.classes), graph.dims), flush,
                                 weights=weight_names(graph))
        name, blob = by_bucket.get(str(k), ("", b""))
        if name != f"{k}:{source_hash(units)}":
            raise ArtifactError(f"artifact {where}: bucket {k}'s kernels are not the ones its "
                                "program generates (LUMOS_LOG=profile changes them)"
                                if name else f"artifact {where} holds no kernels for bucket {k}")
        programs.append(CompiledProgram(_library(blob), layout))
    _openblas()
    return art, programs


def _library(blob: bytes) -> Path:
    """The file holding `blob` (a checked shared library), named by its hash."""
    d = cache_dir().parent / "shipped"
    p = d / f"{hashlib.sha256(blob).hexdigest()[:32]}.so"
    if not p.exists():
        d.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, p)
    return p


@cache
def _openblas() -> None:
    """OpenBLAS loaded by its name first: a library built elsewhere finds it by soname
    even where its rpath (the building machine's site-packages) does not exist."""
    lib = Path(scipy_openblas32.get_lib_dir()) / f"lib{scipy_openblas32.get_library()}.so"
    if lib.exists():
        ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
