"""Benchmark: softmax (last axis) and RMSNorm (with weight) over (4096, 4096) f32.

Peers timed in the same run: torch eager and torch.compile (inductor) when it compiles
here, plus a numpy copy of the same array as the DRAM bandwidth yardstick (either op's
minimum traffic is the copy's: read x once, write y once). Target (issue 4): >= 1.0x
inductor. lumos compiles with a timed search (`--limit` candidates), which picks the
kernel boundaries; `LUMOS_LOG=profile` prints the chosen program's per-kernel times.
OpenMP threads that spin-wait lose their time slices on a shared machine, so
OMP_WAIT_POLICY defaults to passive here (recorded in the JSON). Writes results/norms.json.

    .venv/bin/python benchmarks/norms.py [--rows 4096] [--cols 4096] [--repeats 15] [--limit 16]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from common import median_time

import lumos
from lumos.runtime.cpu import CpuRuntime
from lumos.search import CompileOptions

EPS = 1e-6


def softmax(F, x, w):  # F: the lumos module or torch.nn.functional (w unused)
    return F.softmax(x, -1)


def rms_norm(F, x, w):
    return F.rms_norm(x, (x.shape[-1],), w, eps=EPS)


CASES = {"softmax": softmax, "rms_norm": rms_norm}


def lumos_case(fn, x: np.ndarray, w: np.ndarray, limit: int, repeats: int) -> dict:
    g = lumos.Graph()
    xt, wt = g.tensor(x.shape, lumos.f32, "x"), g.tensor(w.shape, lumos.f32, "w")
    y = fn(lumos, xt, wt).output()
    t0 = time.perf_counter()
    prog = g.compile(CpuRuntime(), CompileOptions(limit=limit, trials=3))
    compile_s = time.perf_counter() - t0
    prog.set_data(xt, x)
    prog.set_data(wt, w)
    prog.execute()
    return {"lumos_compile_s": compile_s, "kernels": prog.compiled.layout.calls,
            "lumos_s": median_time(prog.execute, repeats), "result": prog.get(y).copy()}


def torch_case(fn, x: np.ndarray, w: np.ndarray, want: np.ndarray, repeats: int) -> dict:
    import torch
    import torch.nn.functional as F

    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    out: dict = {}
    with torch.no_grad():
        out["torch_eager_s"] = median_time(lambda: fn(F, tx, tw), repeats)
        try:
            t0 = time.perf_counter()
            compiled = torch.compile(lambda a, b: fn(F, a, b), backend="inductor")
            got = compiled(tx, tw).numpy()
            out["inductor_compile_s"] = time.perf_counter() - t0
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
            out["inductor_s"] = median_time(lambda: compiled(tx, tw), repeats)
        except Exception as e:  # report, do not fail the benchmark
            out["inductor_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return out


def main() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # before any OpenMP runtime loads
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--limit", type=int, default=16, help="search: candidates to time")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    w = rng.standard_normal(args.cols).astype(np.float32)
    dst = np.empty_like(x)
    copy_s = median_time(lambda: np.copyto(dst, x), args.repeats)
    nbytes = 2 * x.nbytes  # read x, write y
    r: dict = {
        "benchmark": "norms", "shape": [args.rows, args.cols], "dtype": "f32",
        "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
        "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
        "lumos_threads": os.environ.get("LUMOS_NUM_THREADS", "default"),
        "torch_threads": torch.get_num_threads(), "search_limit": args.limit,
        "copy_s": copy_s, "copy_gbps": nbytes / copy_s / 1e9,
        "target_speedup_vs_inductor": 1.0, "cases": {},
    }
    for name, fn in CASES.items():
        with torch.no_grad():
            want = fn(F, torch.from_numpy(x), torch.from_numpy(w)).numpy()
        c = lumos_case(fn, x, w, args.limit, args.repeats)
        np.testing.assert_allclose(c.pop("result"), want, rtol=1e-4, atol=1e-6)
        c |= torch_case(fn, x, w, want, args.repeats)
        c["lumos_gbps"] = nbytes / c["lumos_s"] / 1e9
        c["fraction_of_copy_bandwidth"] = copy_s / c["lumos_s"]
        c["speedup_vs_torch_eager"] = c["torch_eager_s"] / c["lumos_s"]
        c["speedup_vs_inductor"] = c.get("inductor_s", float("nan")) / c["lumos_s"]
        c["meets_target"] = c["speedup_vs_inductor"] >= 1.0
        r["cases"][name] = c

    print(f"({args.rows}, {args.cols}) f32, {r['cpus']} CPUs (load average "
          f"{r['load_average_1min']:.1f}), search limit {args.limit}, copy bandwidth "
          f"{r['copy_gbps']:.1f} GB/s")
    print(f"{'':10}{'kernels':>8}{'compile s':>10}{'lumos ms':>10}{'eager ms':>10}"
          f"{'ind. ms':>10}{'vs eager':>10}{'vs ind.':>9}{'GB/s':>7}{'of copy':>9}")
    nan = float("nan")
    for name, c in r["cases"].items():
        print(f"{name:10}{c['kernels']:8}{c['lumos_compile_s']:10.1f}{c['lumos_s'] * 1e3:10.2f}"
              f"{c['torch_eager_s'] * 1e3:10.2f}{c.get('inductor_s', nan) * 1e3:10.2f}"
              f"{c['speedup_vs_torch_eager']:10.2f}{c['speedup_vs_inductor']:9.2f}"
              f"{c['lumos_gbps']:7.1f}{c['fraction_of_copy_bandwidth']:9.0%}")
        if "inductor_error" in c:
            print(f"{name} inductor:", c["inductor_error"])
    out = Path(__file__).resolve().parent / "results" / "norms.json"
    out.parent.mkdir(exist_ok=True)  # (not in a fresh clone)
    out.write_text(json.dumps(r, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
