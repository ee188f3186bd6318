"""`lumos viz` on a tiny graph: the page holds every live node, the e-graph and search
plots and the chosen kernels' times, loads nothing from outside, and renders in headless
Chromium (Debian's `chromium`; skipped where it is not installed, `.ci/run` installs
it); a larger graph is drawn one box per layer."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import lumos
from lumos import cli
from lumos.graph import live_nodes
from lumos.viz.hlir import graph_html, layers

pytestmark = pytest.mark.skipif(shutil.which("dot") is None,
                                reason="Graphviz's `dot` is not installed (apt-get install "
                                       "graphviz; .ci/run installs it)")

TINY = """
import lumos

graph = lumos.Graph()
x = graph.tensor(("s", 32), name="x")
w = graph.tensor((32, 32), name="layers.0.w")
v = graph.tensor((32, 32), name="layers.1.w")
((x @ w).relu() @ v).softmax(-1).output()
"""


def tiny_graph(path: Path) -> lumos.Graph:
    from lumos.cli.viz import graph_of

    return graph_of(path)[0]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, lumos.Graph]:
    d = tmp_path_factory.mktemp("viz")
    (d / "tiny.py").write_text(TINY)
    out = d / "tiny.html"
    assert cli.main(["viz", str(d / "tiny.py"), "-o", str(out), "--search", "3"]) == 0
    return out, tiny_graph(d / "tiny.py")


def test_page_content(page):
    out, g = page
    text = out.read_text()
    assert text.count('class="node"') == len(live_nodes(g))  # every live node drawn
    assert text.count('data-plot="egraph"') == 1 and text.count('data-plot="search"') == 1
    for ruleset in ("expr", "dtype", "lower_cpu", "fuse"):
        assert f"<td>{ruleset}</td>" in text
    rows = re.findall(r"<tr><td class=num>(\d+)</td><td class=num>(\d+)</td>"
                      r"<td>([^<]+)</td><td>(measured|invalid|rejected)</td>", text)
    # (a budget of 3: the seeds, then the moves' search has no room; the baseline is
    # timed only when no seed could be)
    assert 2 <= len(rows) <= 3 and rows[0][2] == "seed 0"
    assert [r[0] for r in rows] == [str(i) for i in range(len(rows))]
    kernels = re.findall(r"<tr><td class=num>\d+</td><td>(\w+)</td><td>\(([\d, ]*)\)</td>"
                         r"<td>f32</td><td class=num>([\d.]+)</td>", text)
    assert kernels and all(float(us) >= 0 for _, _, us in kernels)
    # self-contained: no script, style or image comes from elsewhere
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text)
    assert "url(http" not in text


def test_renders_in_headless_chromium(page, tmp_path):
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; "
                    ".ci/run installs it)")
    out, g = page
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1300,2400"]
    dom = subprocess.run([*flags, "--dump-dom", out.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body is not None, dom[:500]
    attrs = dict(re.findall(r'data-rendered-(\w+)="(\d+)"', body.group(1)))
    assert attrs == {"nodes": str(len(live_nodes(g))), "plots": "2"}
    shot = tmp_path / "page.png"
    subprocess.run([*flags, f"--screenshot={shot}", out.as_uri()], capture_output=True,
                   timeout=120)
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("L"))
    assert (pixels < 200).mean() > 0.01  # drawn, not a blank page


def test_large_graphs_collapse_per_layer():
    g = lumos.Graph()
    h = g.tensor((4, 8), name="tokens")
    for i in range(3):
        w = g.tensor((8, 8), name=f"blk.{i}.w")
        h = (h @ w).relu() + h
    (h * 2.0).sum(-1).output()
    live = live_nodes(g)
    of = layers(g, live)
    assert of[live[0]] == "tokens" and of[live[-1]] == "blk.2"
    assert [of[i] for i in live if g.nodes[i].op == "Input"] == \
        ["tokens", "blk.0", "blk.1", "blk.2"]
    text = graph_html(g, max_nodes=10)
    assert "one box per layer" in text
    for name in ("blk.0", "blk.1", "blk.2"):
        assert f'<details id="layer-{name.replace(".", "-")}"' in text
    overview = text[:text.index("<details")]
    assert overview.count('class="node"') == 4  # tokens and the three layers
