"""Benchmark: compile time as the work grows, a SmolLM2-shaped decoder of 2, 8 and 30
identical layers (benchmarks/smollm2_graph.py, random weights) at one sequence length.

Each compile is cold (a fresh LUMOS_CACHE, artifacts off) with `CompileOptions` as given
(default: the default search), one bucket at `--seq`. Reported per depth: saturation and
search seconds, candidates counted, why the search stopped, the program's time (median of
`--repeats` executions) and the whole compile against the 2-layer one. Target (issue 27):
30 layers compile in at most 1.5x the time of 2, with the default budget (a layer's
kernels are searched once: equal kernels share their verdicts, and their code is compiled
once).

With `--warm`, the depths share one LUMOS_CACHE in the order given (artifacts still
off): each compile finds the kernels and the search verdicts of the ones before it
(`--layers 2,2,8,30`: the same model compiled again, then deeper ones); the `recalled`
column counts the moves decided by earlier searches.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python \\
        benchmarks/compile_layers.py [--layers 2,8,30] [--seq 128] [--options '{...}']
        [--warm]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import median_time
from compile_time import weights
from smollm2_graph import CONFIG, build

import lumos
from lumos.frontend.tensor import Tensor
from lumos.runtime.cpu import CpuRuntime
from lumos.runtime.cpu import program as program_module
from lumos.runtime.cpu import tune as tune_module
from lumos.shape.view import View


def compile_one(layers: int, seq: int, options: dict[str, Any], repeats: int,
                root: Path | None = None) -> dict:
    """One compile in a fresh LUMOS_CACHE, or in `root` (kept)."""
    fresh = root is None
    root = root or Path(tempfile.mkdtemp(prefix="lumos-layers-"))
    os.environ["LUMOS_CACHE"] = str(root)
    os.environ["LUMOS_ARTIFACTS"] = "off"
    g, logits = build(layers=layers)
    data = weights(g, seed=0)
    opts = lumos.CompileOptions(**{**options, "dim_buckets": {"s": [(seq, seq, seq)]}})
    seconds: dict[str, float] = {}
    searches: list[Any] = []
    real_build, real_tune = program_module.build_spaces, tune_module.tune

    def timed_build(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return real_build(*a, **k)
        finally:
            seconds["saturation"] = seconds.get("saturation", 0.0) + time.perf_counter() - t

    def timed_tune(graph: Any, search: Any, *a: Any, **k: Any) -> Any:
        searches.append(search)
        t = time.perf_counter()
        try:
            return real_tune(graph, search, *a, **k)
        finally:
            seconds["search"] = seconds.get("search", 0.0) + time.perf_counter() - t
    program_module.build_spaces, tune_module.tune = timed_build, timed_tune
    try:
        t = time.perf_counter()
        prog = g.compile(CpuRuntime(), opts)
        total = time.perf_counter() - t
    finally:
        program_module.build_spaces, tune_module.tune = real_build, real_tune
    tokens = np.random.default_rng(seq).integers(0, CONFIG["vocab"], seq).astype(np.int32)
    for name, nid in g.inputs.items():
        node = g.nodes[nid]
        prog.set_data(Tensor(g, nid, View.contiguous(node.shape), node.dtype),
                      tokens if name == "tokens" else data[name])
    runtime = median_time(prog.execute, repeats)
    if fresh:
        shutil.rmtree(root, ignore_errors=True)
    s = searches[0] if searches else None
    return {"layers": layers, "nodes": len(g.nodes), "total_s": total,
            "saturation_s": seconds.get("saturation", 0.0),
            "search_s": seconds.get("search", 0.0),
            "counted": s.counted if s else 0, "stop_reason": s.stop_reason if s else None,
            "recalled": len(getattr(s, "recalled", ())),
            "runtime_s": runtime}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="2,8,30")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--options", default="", help="CompileOptions fields as JSON")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warm", action="store_true",
                    help="one cache for all depths, in order (kernels, search verdicts)")
    args = ap.parse_args()
    options = json.loads(args.options) if args.options else {}
    shared = Path(tempfile.mkdtemp(prefix="lumos-layers-")) if args.warm else None
    rows = [compile_one(n, args.seq, options, args.repeats, shared)
            for n in (int(x) for x in args.layers.split(","))]
    if shared is not None:
        shutil.rmtree(shared, ignore_errors=True)
    base = rows[0]["total_s"]
    print(f"SmolLM2-shaped decoder at s={args.seq}, options {options or 'default'}, "
          f"{'one warm cache' if args.warm else 'cold caches'}")
    print(f"{'layers':>6} {'nodes':>6} {'compile s':>10} {'saturate':>9} {'search':>8} "
          f"{'cands':>6} {'recalled':>8} {'vs first':>9} {'run ms':>8}  stop")
    for r in rows:
        print(f"{r['layers']:>6} {r['nodes']:>6} {r['total_s']:>10.1f} {r['saturation_s']:>9.1f} "
              f"{r['search_s']:>8.1f} {r['counted']:>6} {r['recalled']:>8} "
              f"{r['total_s'] / base:>8.2f}x {r['runtime_s'] * 1e3:>8.2f}  {r['stop_reason']}")
    out = Path(__file__).resolve().parent / "results" / "compile_layers.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"benchmark": "compile_layers", "seq": args.seq,
                               "options": options, "warm": args.warm,
                               "date": time.strftime("%Y-%m-%d"),
                               "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
