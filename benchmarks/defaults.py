"""Benchmark: what `g.compile(CpuRuntime())` gives with no options at all, against numpy in
the same process: the demo's attention block (`lumos.demo.build`, d=384, 6 heads, s
declared in 1..512 with no buckets: one compile, run at s = 1, 128 and 512), a 1024^3
matrix product, and a small graph (a product, a layer norm, an epilogue: 64x96). Each
compile is cold (a fresh LUMOS_CACHE); its seconds are reported beside the times, and
the sizes its search timed at. Targets (issue 42): the
block >= 1.5x numpy at 128 and 512, >= 1.0x at 1; the product >= 0.9x numpy.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/defaults.py
        [--options '{"limit": 2}'] [--repeats 50]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import interleaved, openblas_core

import lumos
from lumos.demo import build, numpy_block
from lumos.record import recording


def block(d: int, heads: int, sizes: list[int], rng: np.random.Generator
          ) -> tuple[lumos.Graph, Any, list[tuple[str, dict[str, Any], Callable[[], object]]]]:
    g, inputs, out = build(d, heads)
    weights = {n: (rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32)
               for n in ("wq", "wk", "wv", "wo")}
    runs = []
    for s in sizes:
        x = rng.standard_normal((s, d)).astype(np.float32)
        runs.append((f"s={s}", {inputs[n]: a for n, a in {**weights, "x": x}.items()},
                     lambda x=x: numpy_block(x, weights, heads)))
    return g, out, runs


def matmul(n: int, rng: np.random.Generator
           ) -> tuple[lumos.Graph, Any, list[tuple[str, dict[str, Any], Callable[[], object]]]]:
    g = lumos.Graph()
    a, b = g.tensor((n, n), name="a"), g.tensor((n, n), name="b")
    out = (a @ b).output()
    da, db = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    return g, out, [("", {a: da, b: db}, lambda: da @ db)]


def small(rng: np.random.Generator
          ) -> tuple[lumos.Graph, Any, list[tuple[str, dict[str, Any], Callable[[], object]]]]:
    """relu(layer_norm(x @ w)) * 2 + 1, x (64, 96), w (96, 96): a graph of a few kernels of
    tens of microseconds, where the search's minute is mostly candidates' overheads."""
    g = lumos.Graph()
    x, w = g.tensor((64, 96), name="x"), g.tensor((96, 96), name="w")
    out = (lumos.layer_norm(x @ w, (96,)).relu() * 2 + 1).output()
    dx, dw = rng.standard_normal((64, 96), np.float32), rng.standard_normal((96, 96), np.float32)

    def peer() -> np.ndarray:
        z = dx @ dw
        z = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
        return np.maximum(z, 0) * 2 + 1
    return g, out, [("", {x: dx, w: dw}, peer)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--options", default="", help="CompileOptions fields as JSON (default: none)")
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    fields = json.loads(args.options) if args.options else None
    rng = np.random.default_rng(0)
    cases = {"attention block d=384 h=6": block(384, 6, [1, 128, 512], rng),
             "matmul 1024^3": matmul(1024, rng),
             "small: relu(layer_norm(x@w)) 64x96": small(rng)}
    print(f"OpenBLAS {openblas_core()}; options {fields or 'none'}; cold compiles")
    rows = []
    tmp = tempfile.TemporaryDirectory(prefix="defaults-")  # (the kernels load from it)
    for k, (name, (g, out, runs)) in enumerate(cases.items()):
        os.environ["LUMOS_CACHE"] = str(Path(tmp.name) / str(k))  # a cold cache each
        t0 = time.perf_counter()
        with recording() as rec:
            prog = g.compile(lumos.CpuRuntime(),
                             None if fields is None else lumos.CompileOptions(**fields))
        compile_s = time.perf_counter() - t0
        timed_at = [b.sizes for b in rec.compiles[-1].buckets]
        for size, data, peer in runs:
            for t, a in data.items():
                prog.set_data(t, a)
            prog.execute()
            err = float(np.abs(prog.get(out) - peer()).max())
            assert err < 1e-2, f"{name} {size}: lumos and numpy disagree by {err}"
            times = interleaved({"lumos": prog.execute, "numpy": peer}, args.repeats,
                                least=0.5)
            rows.append({"case": f"{name} {size}".strip(), "compile_s": compile_s,
                         "timed_at": timed_at, "lumos_ms": times["lumos"] * 1e3,
                         "numpy_ms": times["numpy"] * 1e3,
                         "ratio": times["numpy"] / times["lumos"], "max_abs_err": err})
            r = rows[-1]
            print(f"{r['case']:<34} lumos {r['lumos_ms']:8.3f} ms  numpy {r['numpy_ms']:8.3f} "
                  f"ms  {r['ratio']:5.2f}x numpy  (compile {compile_s:.1f} s, timed at "
                  f"{timed_at})")
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "defaults.json").write_text(json.dumps(
        {"benchmark": "defaults", "options": fields, "date": time.strftime("%Y-%m-%d"),
         "openblas": openblas_core(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
