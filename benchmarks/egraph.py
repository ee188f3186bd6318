"""Benchmark: encode, saturate (core rulesets) and read back a 30-layer SmolLM2-shaped
decoder (d=576, 9 heads, 3 KV heads, FFN 1536, vocab 49152, symbolic seq len).

Target on this machine: under 10 s and under 2 GB peak RSS. Prints e-nodes, e-classes
and the time of each phase; writes benchmarks/results/egraph.json.

    .venv/bin/python benchmarks/egraph.py [--layers 30]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from egglog import bindings as b

sys.path.insert(0, str(Path(__file__).resolve().parent))

from smollm2_graph import build  # noqa: E402

from lumos.egraph.encode import bound_facts, fingerprints, insert_commands  # noqa: E402
from lumos.egraph.readback import read_space  # noqa: E402
from lumos.egraph.schedule import CORE, Budget, Runner, load  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=30)
    args = ap.parse_args()
    times: dict[str, float] = {}

    def phase(name: str, fn: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        r = fn()
        times[name] = time.perf_counter() - t
        return r

    g, _ = phase("build graph", lambda: build(args.layers))
    eg = b.EGraph()
    ctors = phase("load rules", lambda: load(eg, CORE))
    cmds = phase("encode", lambda: insert_commands(g))
    phase("insert", lambda: eg.run_program(*cmds, *bound_facts(g.dims)))
    runner = Runner(eg, ctors, Budget())
    inserted = runner.enodes()
    phase("saturate", lambda: runner.schedule(CORE.stages))
    saturated = runner.enodes()
    space = phase("read back", lambda: read_space(eg, ctors, fingerprints(g)))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = sum(times.values()) - times["build graph"]
    result = {
        "layers": args.layers, "hlir_nodes": len(g.nodes), "enodes_inserted": inserted,
        "enodes_saturated": saturated, "space_classes": len(space.classes),
        "space_enodes": space.num_enodes, "seconds": {k: round(v, 4) for k, v in times.items()},
        "egraph_seconds": round(total, 3), "peak_rss_mb": round(rss_mb),
        "rulesets": {rs: {"iterations": r, "matches": m, "seconds": round(s, 4)}
                 for rs, (r, m, s) in runner.stats.items()},
        "target": "egraph_seconds < 10, peak_rss_mb < 2048",
    }
    print(f"{'HLIR nodes':<22}{len(g.nodes):>10}")
    print(f"{'e-nodes inserted':<22}{inserted:>10}")
    print(f"{'e-nodes saturated':<22}{saturated:>10}")
    print(f"{'space classes':<22}{len(space.classes):>10}")
    print(f"{'space e-nodes':<22}{space.num_enodes:>10}")
    for k, v in times.items():
        print(f"{k:<22}{v:>9.3f}s")
    print(f"{'e-graph total':<22}{total:>9.3f}s   (target < 10 s)")
    print(f"{'peak RSS':<22}{rss_mb:>8.0f}MB   (target < 2048 MB)")
    out = Path(__file__).resolve().parent / "results" / "egraph.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
