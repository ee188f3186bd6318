"""Benchmark: f32 matmul (n, n) @ (n, n) for n in 256/512/1024/2048, in GFLOP/s.

Peers timed in the same run: numpy (OpenBLAS) and torch. lumos compiles one program
for a symbolic n with a timed search (`--limit` candidates) at a representative size
of 256 (the oracle check materializes the (n, n, n) product, so the search cannot run
at the large sizes), then executes it at every size. The search's alternatives include
the fused multiply-sum reduction kernel and a cblas_sgemm call (OpenBLAS from
scipy-openblas32, lower_cpu.egg's KGemm); it picks the BLAS call. Target: >= 0.9x numpy
at 1024. Run with OpenMP's default wait policy (lumos splits a product over its OpenMP
threads; waiting passively, each product wakes them: n=512 ran at half speed). Writes
results/matmul.json.

    .venv/bin/python benchmarks/matmul.py [--sizes 256 512 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from common import median_time, openblas_core

import lumos
from lumos.runtime.cpu import CpuRuntime
from lumos.search import CompileOptions

QUIET_S = 0.5  # seconds of pause before timing each system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--limit", type=int, default=4, help="search: candidates to time")
    args = ap.parse_args()

    g = lumos.Graph()
    n = g.dim("n", 1, 4096)
    a, b = g.tensor((n, n), lumos.f32, "a"), g.tensor((n, n), lumos.f32, "b")
    c = (a @ b).output()
    t0 = time.perf_counter()
    opts = CompileOptions(limit=args.limit, trials=3, dim_buckets={"n": [(1, 4096, 256)]})
    prog = g.compile(CpuRuntime(), opts)
    compile_s = time.perf_counter() - t0
    kernels = prog.compiled.layout.calls
    try:
        import torch
    except ImportError:
        torch = None

    rows = []
    rng = np.random.default_rng(0)
    for size in args.sizes:
        x = rng.standard_normal((size, size)).astype(np.float32)
        y = rng.standard_normal((size, size)).astype(np.float32)
        prog.set_data(a, x)
        prog.set_data(b, y)
        prog.execute()
        want = x @ y
        np.testing.assert_allclose(prog.get(c), want, rtol=1e-3, atol=1e-3 * np.sqrt(size))
        flop = 2 * size**3
        # numpy's OpenBLAS threads busy-wait after a call (lumos right after `x @ y` ran
        # at 34 GFLOP/s at n=512, 223 after a pause): each system is timed after a pause
        time.sleep(QUIET_S)
        r: dict = {"n": size, "lumos_s": median_time(prog.execute, args.repeats)}
        time.sleep(QUIET_S)
        r["numpy_s"] = median_time(lambda: x @ y, args.repeats)  # noqa: B023
        if torch is not None:
            tx, ty = torch.from_numpy(x), torch.from_numpy(y)
            time.sleep(QUIET_S)
            r["torch_s"] = median_time(lambda: tx @ ty, args.repeats)  # noqa: B023
        for k in ("lumos", "numpy", "torch"):
            if f"{k}_s" in r:
                r[f"{k}_gflops"] = flop / r[f"{k}_s"] / 1e9
        r["ratio_vs_numpy"] = r["numpy_s"] / r["lumos_s"]
        rows.append(r)
        print(f"n={size:5d}  lumos {r['lumos_gflops']:8.1f} GFLOP/s  numpy "
              f"{r['numpy_gflops']:8.1f}  torch {r.get('torch_gflops', float('nan')):8.1f}  "
              f"lumos/numpy {r['ratio_vs_numpy']:.3f}", flush=True)

    out = {"benchmark": "matmul", "dtype": "f32", "kernels": kernels, "compile_s": compile_s,
           "search_limit": args.limit, "cpus": os.cpu_count(),
           "load_average_1min": os.getloadavg()[0], "openblas_core": openblas_core(),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
           "target": {"ratio_vs_numpy_at_1024": 0.9}, "sizes": rows}
    print(f"lumos: {kernels} kernel(s), compile + search {compile_s:.1f} s; OpenBLAS "
          f"{out['openblas_core']}")
    path = Path(__file__).resolve().parent / "results" / "matmul.json"
    path.parent.mkdir(exist_ok=True)  # (not in a fresh clone)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
