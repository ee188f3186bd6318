"""`lumos viz TARGET -o PAGE.html`: compile a model (as `lumos run` and the model commands
name them) or the graph a Python file defines, on the CPU runtime with the artifact cache
off (so saturation and search run and are recorded), and write the page of lumos.viz.

A Python file defines `graph` (a lumos.Graph with outputs) or `build()` returning one,
and optionally `options` (CompileOptions; else `--search`)."""

from __future__ import annotations

import argparse
import os
import runpy
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lumos.cli.common import DEFAULT_SEARCH, say
from lumos.errors import LumosError

MODELS = ("smollm2", "minilm", "mobilenet", "whisper")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("viz", help="one HTML page of what the compiler did: graph, e-graph, "
                                   "kernels, search")
    p.add_argument("target", help=f"a model ({', '.join(MODELS)}, or a .gguf file) or a "
                                  "Python file defining `graph` or `build()`")
    p.add_argument("-o", "--output", help="the page to write (default: TARGET's name + .html)")
    p.add_argument("--search", type=int, default=DEFAULT_SEARCH, metavar="N",
                   help=f"candidates timed per bucket (default {DEFAULT_SEARCH}; 0: the "
                        "unsearched baseline)")
    p.add_argument("--max-nodes", type=int, default=150,
                   help="graphs with more live nodes are drawn one box per layer")
    p.add_argument("--context", type=int, default=256, help="LLMs: KV cache length")
    p.add_argument("--max-prefill", type=int, default=64, help="LLMs: largest prefill bucket")


@contextmanager
def _fresh() -> Any:
    """The artifact cache off: a compile that loads its choices has nothing to show."""
    old = os.environ.get("LUMOS_ARTIFACTS")
    os.environ["LUMOS_ARTIFACTS"] = "off"
    try:
        yield
    finally:
        if old is None:
            del os.environ["LUMOS_ARTIFACTS"]
        else:
            os.environ["LUMOS_ARTIFACTS"] = old


def graph_of(path: Path) -> tuple[Any, Any]:
    """(graph, options or None) of a Python file (see the module docstring)."""
    from lumos.graph import Graph

    ns = runpy.run_path(str(path), run_name="__lumos_viz__")
    g = ns.get("graph")
    if g is None and callable(ns.get("build")):
        g = ns["build"]()
    if not isinstance(g, Graph):
        raise LumosError(f"{path}: defines no `graph` (a lumos.Graph) or `build()` returning "
                         "one")
    if not g.outputs:
        raise LumosError(f"{path}: the graph has no outputs (mark results with t.output())")
    return g, ns.get("options")


def compile_target(args: argparse.Namespace) -> None:
    """Compile what `args.target` names (inside a lumos.record.recording())."""
    from lumos.runtime.cpu import CpuRuntime
    from lumos.search import CompileOptions

    opts = CompileOptions(limit=args.search) if args.search > 0 else None
    target = args.target
    if target.endswith(".py"):
        if not Path(target).is_file():
            raise LumosError(f"{target}: no such file")
        g, given = graph_of(Path(target))
        g.compile(CpuRuntime(), given if given is not None else opts)
    elif target in ("smollm2",) or target.endswith(".gguf"):
        from lumos.cli.llm import load_llm
        from lumos.generate import Generator

        pre = load_llm(target, args.context)
        Generator(pre.model, pre.state, CpuRuntime(), max_prefill=args.max_prefill,
                  options=opts, progress=say)
    elif target == "minilm":
        from lumos.models.bert import SentenceEncoder

        SentenceEncoder(runtime=CpuRuntime(), max_batch=8, options=opts)
    elif target == "mobilenet":
        from lumos.models.mobilenet import Classifier

        Classifier(runtime=CpuRuntime(), max_batch=1, options=opts)
    elif target == "whisper":
        from lumos.models.whisper import Transcriber

        Transcriber(runtime=CpuRuntime(), options=opts)
    else:
        raise LumosError(f"unknown viz target {target!r} (a model: {', '.join(MODELS)}, a "
                         ".gguf file, or a Python file defining a graph)")


def cmd_viz(args: argparse.Namespace) -> int:
    from lumos import record, viz

    out = Path(args.output or Path(args.target).with_suffix(".html").name)
    with _fresh(), record.recording() as rec:
        compile_target(args)
    say(f"{len(rec.compiles)} compile(s) recorded; timing the chosen kernels")
    text = viz.page(rec.compiles, f"lumos viz: {args.target}", args.max_nodes)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, out)
    say(f"wrote {out}")
    return 0
