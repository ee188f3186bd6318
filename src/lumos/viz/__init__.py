"""`lumos viz`: one self-contained HTML page of what the compiler did with a graph: the
HLIR graph (Graphviz `dot`), the e-graph's size per ruleset run and round, the chosen
program's kernels with their times and what each fused, and the search's progress
(matplotlib). The page's SVG is inline; it needs no network to open.

    with lumos.record.recording() as rec:
        g.compile(lumos.CpuRuntime(), options)
    Path("page.html").write_text(lumos.viz.page(rec.compiles, "my graph"))
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from string import Template

from lumos.record import BucketRecord, CompileRecord
from lumos.viz.hlir import graph_html
from lumos.viz.kernels import kernel_rows
from lumos.viz.plots import egraph_svg, search_svg

_PAGE = Template((Path(__file__).with_name("page.html")).read_text())


def _table(head: Sequence[str], rows: Sequence[Sequence[object]],
           numeric: Sequence[int] = ()) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(
        f'<td{" class=num" if k in numeric else ""}>{html.escape(str(v))}</td>'
        for k, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _bucket(c: CompileRecord, k: int, b: BucketRecord, profile: bool) -> str:
    dims = ", ".join(f"{d} in [{lo}, {'inf' if hi is None else hi}] at {rep}"
                     for d, (lo, hi, rep) in b.bucket.items()) or "static shapes"
    space = b.space
    parts = [f"<h3>Bucket {k}: {html.escape(dims)}</h3>",
             f"<p>Search space: {len(space.classes)} e-classes, {space.num_enodes} e-nodes "
             f"(the CPU's executable ones).</p>"]
    if b.saturation:
        parts.append('<div class="plot" data-plot="egraph">' + egraph_svg(b.saturation) +
                     "</div>")
        parts.append("<details><summary>Every ruleset run</summary>" + _table(
            ("stage", "round", "ruleset", "iterations", "matches", "seconds", "e-nodes after"),
            [(r.stage, r.round, r.ruleset, r.iterations, r.matches, f"{r.seconds:.4f}",
              r.enodes) for r in b.saturation], (0, 1, 3, 4, 5, 6)) + "</details>")
    else:
        parts.append('<p class="note">No saturation recorded (the program came from an '
                     "artifact).</p>")
    if b.trials:
        parts.append('<div class="plot" data-plot="search">' + search_svg(b.trials) + "</div>")
        parts.append(f"<p>Search stopped: {html.escape(b.stop_reason or '?')}.</p>")
        parts.append("<details><summary>Every candidate</summary>" + _table(
            ("#", "generation", "origin", "outcome", "ms", "best ms after it"),
            [(t.index, t.generation, t.origin, t.outcome,
              "" if t.seconds is None else f"{t.seconds * 1e3:.4g}",
              "" if t.best is None else f"{t.best * 1e3:.4g}") for t in b.trials],
            (0, 1, 4, 5)) + "</details>")
    else:
        parts.append('<p class="note">Not searched: the runtime\'s baseline program (no '
                     "options), or a program loaded from an artifact.</p>")
    if profile and c.runtime == "cpu":
        flush = bool(getattr(c.options, "flush_denormals", False))
        rows = kernel_rows(c.graph, b, flush)
        total = sum(r.microseconds or 0 for r in rows)
        parts.append(f"<p>Chosen program: {len(rows)} kernels, {total:.1f} us in all at the "
                     "representative dims (median of 3 runs on random inputs).</p>")
        parts.append(_table(("kernel", "op", "shape", "dtype", "us", "computes inline"),
                            [(r.index, r.op, r.shape, r.dtype,
                              "" if r.microseconds is None else f"{r.microseconds:.1f}",
                              r.fused) for r in rows], (0, 4)))
    return "\n".join(parts)


def page(compiles: Sequence[CompileRecord], title: str, max_nodes: int = 150,
         profile: bool = True) -> str:
    """The HTML page of recorded compiles (lumos.record); `max_nodes`: larger graphs are
    drawn one box per layer; `profile`: time the chosen kernels (CPU runtime)."""
    body = []
    for n, c in enumerate(compiles):
        g = c.graph
        head = f"Graph {n}" if len(compiles) > 1 else "Graph"
        body.append(f"<h2>{head}: {len(g.nodes)} nodes, {len(g.outputs)} outputs, "
                    f"{html.escape(c.runtime)} runtime</h2>")
        if c.loaded:
            body.append(f'<p class="note">Loaded from {html.escape(c.loaded)}.</p>')
        body.append(graph_html(g, max_nodes))
        for k, b in enumerate(c.buckets):
            body.append(_bucket(c, k, b, profile))
    if not compiles:
        body.append("<p>Nothing was compiled.</p>")
    return _PAGE.substitute(title=html.escape(title), body="\n".join(body))
