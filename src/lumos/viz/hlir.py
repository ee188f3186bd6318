"""The HLIR graph as SVG, laid out by Graphviz's `dot`: every live node (op, shape,
dtype) when the graph is small, else one box per layer with the edges between layers,
and each layer's own nodes drawn apart.

A node's layer is the layer of the most recently created named input it depends on
(weights are created as the model is built, layer by layer): `blk.3.attn_q.weight` puts
what reads it, and what follows until the next layer's weights, into `blk.3`; nodes that
depend on no input (constants) join their first reader's layer.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from collections import Counter, defaultdict

from lumos.errors import LumosError
from lumos.graph import Graph, live_nodes
from lumos.hlir import BINARY, REDUCE, UNARY

COLORS = {**dict.fromkeys(UNARY, "#fde2c8"), **dict.fromkeys(BINARY, "#d7e8fb"),
          **dict.fromkeys(REDUCE, "#f9d0d6"), **dict.fromkeys(("Iota", "Gather", "Scatter"),
                                                              "#e3d7f6"),
          "Cast": "#eeeeee", "Input": "#d8f0d2", "Constant": "#f4f1c9", "Output": "#c9ecec"}


def dot_svg(text: str) -> str:
    """`dot -Tsvg` of a graph in the DOT language, as an inline <svg> element."""
    exe = shutil.which("dot")
    if exe is None:
        raise LumosError("lumos viz lays out graphs with Graphviz's `dot`, which is not "
                         "installed (Debian/Ubuntu: apt-get install graphviz)")
    out = subprocess.run([exe, "-Tsvg"], input=text, capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise LumosError(f"dot failed (exit {out.returncode}): {out.stderr.strip()[:500]}")
    return out.stdout[out.stdout.index("<svg"):]


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def label(graph: Graph, i: int) -> str:
    n = graph.nodes[i]
    shape = "(" + ", ".join(map(repr, n.shape)) + ")"
    extra = n.name if n.op == "Input" else repr(n.value) if n.op == "Constant" else \
        f"axis {n.axis}" if n.op in REDUCE else ""
    return "\n".join(x for x in (f"%{i} {n.op}", extra, f"{shape} {n.dtype.name}") if x)


def layer_of(name: str | None) -> str:
    """'blk.3.attn_q.weight' -> 'blk.3'; 'output_norm.weight' -> 'output_norm'."""
    parts = (name or "inputs").split(".")
    k = next((k for k, p in enumerate(parts) if p.isdigit()), None)
    return ".".join(parts[:k + 1]) if k is not None else parts[0]


def layers(graph: Graph, live: list[int]) -> dict[int, str]:
    """Each live node's layer (see the module docstring)."""
    latest: dict[int, int | None] = {}
    for i in live:
        n = graph.nodes[i]
        latest[i] = i if n.op == "Input" else max(
            (latest[j] for j in n.inputs if latest.get(j) is not None), default=None)
    out = {i: layer_of(graph.nodes[k].name) for i, k in latest.items() if k is not None}
    readers: dict[int, list[int]] = defaultdict(list)
    for i in live:
        for j in graph.nodes[i].inputs:
            readers[j].append(i)
    for i in reversed(live):
        if i not in out:
            out[i] = next((out[r] for r in readers[i] if r in out), "constants")
    return out


def full_dot(graph: Graph, nodes: list[int], title: str = "") -> str:
    """DOT text of `nodes` and the edges among them (inputs from outside drawn as stubs)."""
    inside = set(nodes)
    lines = ["digraph hlir {", 'graph [rankdir=TB, fontname="Helvetica", fontsize=11'
             + (f", label={_quote(title)}, labelloc=t" if title else "") + "];",
             'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9];',
             'edge [color="#777777", arrowsize=0.6];']
    stubs = set()
    for i in nodes:
        n = graph.nodes[i]
        lines.append(f"n{i} [label={_quote(label(graph, i))}, "
                     f"fillcolor={_quote(COLORS.get(n.op, '#ffffff'))}, "
                     f"tooltip={_quote(repr(n))}];")
        for j in n.inputs:
            if j not in inside and j not in stubs:
                stubs.add(j)
                lines.append(f"n{j} [label={_quote(f'%{j} {graph.nodes[j].op}')}, "
                             'style="dashed,rounded", fillcolor="#ffffff"];')
            lines.append(f"n{j} -> n{i};")
    lines.append("}")
    return "\n".join(lines)


def collapsed_dot(graph: Graph, live: list[int], of: dict[int, str]) -> str:
    """DOT text of one box per layer (its node count and commonest ops) and the edges
    between layers (with their counts; none from constants, which identical nodes share
    across layers)."""
    order = list(dict.fromkeys(of[i] for i in live))
    ops: dict[str, Counter] = defaultdict(Counter)
    for i in live:
        ops[of[i]][graph.nodes[i].op] += 1
    edges: Counter = Counter()  # (a constant shared by every layer draws no edge)
    for i in live:
        for j in graph.nodes[i].inputs:
            if of[j] != of[i] and graph.nodes[j].op != "Constant":
                edges[(of[j], of[i])] += 1
    lines = ["digraph layers {", 'graph [rankdir=TB, fontname="Helvetica"];',
             'node [shape=box, style="rounded,filled", fillcolor="#eef3fb", '
             'fontname="Helvetica", fontsize=10];', 'edge [color="#777777", fontsize=8];']
    for k, name in enumerate(order):
        top = ", ".join(f"{n} {op}" for op, n in ops[name].most_common(4))
        text = f"{name}\n{sum(ops[name].values())} nodes\n{top}"
        lines.append(f"g{k} [label={_quote(text)}, "
                     f"URL={_quote('#layer-' + _anchor(name))}];")
    at = {name: k for k, name in enumerate(order)}
    for (a, b), n in edges.items():
        lines.append(f"g{at[a]} -> g{at[b]}" + (f' [label="{n}"]' if n > 1 else "") + ";")
    lines.append("}")
    return "\n".join(lines)


def _anchor(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", name)


def graph_html(graph: Graph, max_nodes: int = 150) -> str:
    """The graph section of the page: one SVG, or the layers' overview and each layer."""
    live = live_nodes(graph)
    if len(live) <= max_nodes:
        return f'<div class="graph" data-nodes="{len(live)}">{dot_svg(full_dot(graph, live))}</div>'
    of = layers(graph, live)
    parts = [f"<p>{len(live)} live nodes, more than {max_nodes}: one box per layer "
             "(click one to see its nodes).</p>",
             f'<div class="graph overview" data-nodes="{len(live)}">'
             f"{dot_svg(collapsed_dot(graph, live, of))}</div>"]
    by_layer: dict[str, list[int]] = defaultdict(list)
    for i in live:
        by_layer[of[i]].append(i)
    for name, nodes in by_layer.items():
        title = f"{name}: {len(nodes)} nodes"
        body = dot_svg(full_dot(graph, nodes)) if len(nodes) <= 4 * max_nodes else \
            f"<p>{len(nodes)} nodes: too many to draw.</p>"
        parts.append(f'<details id="layer-{_anchor(name)}"><summary>{html.escape(title)}'
                     f'</summary><div class="graph">{body}</div></details>')
    return "\n".join(parts)
