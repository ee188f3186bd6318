"""Benchmark: saturation of real decoders' graphs, per ruleset (issue 42's first step: a
7,000-node decoder within 15 s). The graph is `Generator`'s (tokens (1, s), the cache's
filled length p) at the decode bucket s = 1, saturated in this process with the CPU
runtime's rules and no time limit; printed per ruleset: seconds, iterations, matches, and
the e-nodes at the end. There is no peer: inductor and llama.cpp do not saturate.

    .venv/bin/python benchmarks/saturation.py [--models smollm2,gemma3] [--gguf FILE ...]
        [--layers N] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import defaultdict
from pathlib import Path

from lumos.dtype import i64
from lumos.egraph.buckets import bounds, combos
from lumos.egraph.build import NO_LIMITS, saturate
from lumos.graph import Graph
from lumos.io import GGUFFile
from lumos.models import llama
from lumos.runtime.cpu import CpuRuntime
from lumos.shape.expr import sym

FILES = {"smollm2": llama.smollm2_path, "gemma3": llama.gemma3_path}


def decode_graph(path: Path, layers: int | None) -> Graph:
    pre = llama.load(path, max_context=256)
    model = pre.model
    if layers:  # the first `layers` layers of the same file
        c = model.config
        c = dataclasses.replace(c, num_layers=layers, sliding_layers=tuple(
            i for i in c.sliding_layers if i < layers))
        _, formats = llama.gguf_state(GGUFFile(path), model.config)
        model = llama.Llama(c, formats, 256)
    g = Graph()
    g.dim("s", 1, 16)
    g.dim("p", 0, 255)
    model(g.tensor((1, "s"), i64, name="tokens"), sym("p")).output()
    return g


def run(name: str, path: Path, layers: int | None) -> dict:
    g = decode_graph(path, layers)
    t0 = time.perf_counter()
    space, = saturate(g, [bounds(combos(g.dims, {"s": [(1, 1, 1)]})[0])], CpuRuntime.rules,
                       NO_LIMITS)
    total = time.perf_counter() - t0
    per: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
    for r in space.saturation:
        per[r.ruleset][0] += r.seconds
        per[r.ruleset][1] += r.iterations
        per[r.ruleset][2] += r.matches
    return {"model": name, "file": str(path), "layers": layers, "hlir_nodes": len(g.nodes),
            "seconds": total, "enodes": space.saturation[-1].enodes,
            "rulesets": {k: dict(zip(("seconds", "iterations", "matches"), v, strict=True))
                         for k, v in per.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma3")
    ap.add_argument("--gguf", nargs="*", default=[], help="other GGUF files")
    ap.add_argument("--layers", type=int, help="only the first N layers of each model")
    ap.add_argument("--json", default="saturation.json")
    args = ap.parse_args()
    todo = [(m, FILES[m]()) for m in args.models.split(",") if m] + \
        [(Path(f).stem, Path(f)) for f in args.gguf]
    results = []
    for name, path in todo:
        r = run(name, path, args.layers)
        results.append(r)
        print(f"\n{name}: {r['hlir_nodes']} HLIR nodes, saturated in {r['seconds']:.1f} s, "
              f"{r['enodes']} e-nodes")
        print("| ruleset | seconds | iterations | matches |\n|---|---|---|---|")
        for k, v in r["rulesets"].items():
            print(f"| {k} | {v['seconds']:.2f} | {v['iterations']} | {v['matches']} |")
    Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
