"""Benchmark: GEMV y = x @ W.T, x (1, 4096), W (4096, 4096) as f32 and packed in each GGUF
block format (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; `--qtypes` picks).

A decode step of a quantized LLM is a chain of such products: each weight byte is read
once per token, so the measure is the weight bytes read per second against the machine's
DRAM read bandwidth (common.read_bandwidth: numpy's max over a 256 MiB f32 array). The
64 MiB f32 matrix fits this machine's last-level cache, so every system is timed "cold"
(a 1 GiB read evicts the caches before each run; the ratios and targets use these) and
"warm" (repeated runs, weights cached). Packed weights bind as their parts (quants, f16
scales, mins) and are dequantized in the graph by `lumos.nn.quant.dequantize`; the
search's seed genomes fuse that into the multiply-sum kernel (the `kernels` column counts
the compiled program's kernels: 1 = fused; `MB` the packed weight's bytes, `stored` those
of the buffers the program computes once from the weights, such as int8 quants, which it
then reads in their place: `GB/s` counts `MB`). Peers timed in the same run: numpy (OpenBLAS
sgemv) and torch `F.linear`, both on the f32 weights. Targets (issue 4): f32 >= 80% of
the read yardstick; packed >= 2.5x faster than lumos f32. `compile s` is near 0 when the
artifact cache holds the searched program (LUMOS_ARTIFACTS=off searches again). OpenMP
threads that spin-wait lose their time slices on a shared machine, so OMP_WAIT_POLICY
defaults to passive here (recorded in the JSON). Writes results/gemv.json.

    .venv/bin/python benchmarks/gemv.py [--n 4096] [--k 4096] [--repeats 25] [--limit 8]
        [--qtypes Q8_0,Q4_K]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import evict_caches, median_time, openblas_core, read_bandwidth

import lumos
from lumos.io.quantize import quantize
from lumos.nn.quant import FORMATS, Packed, dequantize, part_dtypes

QTYPES = tuple(FORMATS)


def quantized(w: np.ndarray, qtype: str) -> tuple[Packed, np.ndarray]:
    """`w` packed as `qtype` (lumos.io.quantize), and gguf's numpy dequantization of it
    (the reference)."""
    import gguf

    packed = quantize(qtype, w)
    kind = gguf.GGMLQuantizationType[qtype]
    return packed, gguf.quants.dequantize(packed.raw(), kind).reshape(w.shape)


def lumos_case(x: np.ndarray, weight: np.ndarray | Packed, limit: int,
               repeats: int) -> dict:
    """Compile y = x @ W.T (W an f32 input, or packed parts dequantized in the graph) with a
    timed search, and time it."""
    g = lumos.Graph()
    xt = g.tensor(x.shape, lumos.f32, "x")
    if isinstance(weight, Packed):
        dtypes = part_dtypes(weight.qtype)
        parts = {k: g.tensor(a.shape, dtypes[k], f"w.{k}", weight=True)
                 for k, a in weight.parts.items()}
        feeds = {parts[k]: a for k, a in weight.parts.items()}
        w = dequantize(weight.qtype, parts)
    else:
        w = g.tensor(weight.shape, lumos.f32, "w", weight=True)
        feeds = {w: weight}
    y = (xt @ w.T).output()
    t0 = time.perf_counter()
    prog = g.compile(lumos.CpuRuntime(), lumos.CompileOptions(limit=limit, trials=3))
    compile_s = time.perf_counter() - t0
    prog.set_data(xt, x)
    for t, a in feeds.items():
        prog.set_data(t, a)
    prog.execute()
    return {"lumos_compile_s": compile_s, "kernels": prog.compiled.layout.calls,
            "stored_bytes": prog.statics.nbytes,
            "result": prog.get(y).copy(), **times("lumos", prog.execute, repeats)}


def times(name: str, fn: Callable[[], object], repeats: int) -> dict[str, float]:
    """`name`_s: the median time with the caches evicted before each run; `name`_warm_s:
    of repeated runs."""
    return {f"{name}_s": median_time(fn, repeats, before=evict_caches),
            f"{name}_warm_s": median_time(fn, repeats)}


def check(got: np.ndarray, w: np.ndarray, x: np.ndarray, what: str) -> float:
    """Compare with the float64 product; the bound per row is the f32 dot-product error
    sqrt(K) * 4 eps * (|W| @ |x|). Returns the largest error relative to that bound."""
    want = w.astype(np.float64) @ x[0].astype(np.float64)
    bound = np.sqrt(x.shape[1]) * 4 * np.finfo(np.float32).eps * (np.abs(w) @ np.abs(x[0]))
    ratio = float(np.max(np.abs(got.reshape(-1) - want) / bound))
    if got.shape != (1, w.shape[0]) or not ratio <= 1.0:
        raise AssertionError(f"gemv {what}: output {got.shape} differs from numpy by "
                             f"{ratio:.2f}x the f32 error bound")
    return ratio


def main() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # before any OpenMP runtime loads
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="output features (rows of W)")
    ap.add_argument("--k", type=int, default=4096, help="input features (a multiple of 32)")
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--limit", type=int, default=8, help="search: candidates to time")
    ap.add_argument("--qtypes", default=",".join(QTYPES), help="packed formats to time")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, args.k)).astype(np.float32)
    w32 = rng.standard_normal((args.n, args.k)).astype(np.float32)
    read_bps, threads = read_bandwidth(args.repeats)
    xv, tx, tw = x[0], torch.from_numpy(x), torch.from_numpy(w32)
    peers = times("numpy", lambda: w32 @ xv, args.repeats)
    with torch.no_grad():
        peers |= times("torch", lambda: F.linear(tx, tw), args.repeats)
    numpy_s, torch_s = peers["numpy_s"], peers["torch_s"]
    r: dict = {
        "benchmark": "gemv", "shape": {"x": [1, args.k], "W": [args.n, args.k]},
        "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
        "openblas_core": openblas_core(), "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
        "lumos_threads": os.environ.get("LUMOS_NUM_THREADS", "default"),
        "torch_threads": torch.get_num_threads(), "search_limit": args.limit,
        "read_yardstick": f"numpy max over a 256 MiB f32 array, {threads} thread(s)",
        "read_gbps": read_bps / 1e9,
        "peers_f32": peers | {"numpy_gbps": w32.nbytes / numpy_s / 1e9,
                              "torch_gbps": w32.nbytes / torch_s / 1e9},
        "targets": {"f32_fraction_of_read": 0.8, "packed_speedup_vs_lumos_f32": 2.5},
        "cases": {},
    }
    weights: dict[str, tuple[np.ndarray | Packed, np.ndarray, int]] = {
        "f32": (w32, w32, w32.nbytes)}
    qtypes = args.qtypes.split(",")
    for q in qtypes:
        packed, ref = quantized(w32, q)
        weights[q] = (packed, ref, packed.nbytes)
    for name, (weight, ref, nbytes) in weights.items():
        c = lumos_case(x, weight, args.limit, args.repeats)
        c["error_vs_bound"] = check(c.pop("result"), ref, x, name)
        c["weight_bytes"] = nbytes
        c["lumos_gbps"] = nbytes / c["lumos_s"] / 1e9
        c["fraction_of_read"] = nbytes / c["lumos_s"] / read_bps
        c["speedup_vs_numpy_f32"] = numpy_s / c["lumos_s"]
        c["speedup_vs_torch_f32"] = torch_s / c["lumos_s"]
        r["cases"][name] = c
    f32_s = r["cases"]["f32"]["lumos_s"]
    for c in r["cases"].values():
        c["speedup_vs_lumos_f32"] = f32_s / c["lumos_s"]
    f32 = r["cases"]["f32"]
    f32["meets_target"] = f32["fraction_of_read"] >= 0.8
    for q in qtypes:
        r["cases"][q]["meets_target"] = r["cases"][q]["speedup_vs_lumos_f32"] >= 2.5

    print(f"GEMV (1, {args.k}) @ ({args.n}, {args.k}).T, {r['cpus']} CPUs (load average "
          f"{r['load_average_1min']:.1f}), search limit {args.limit}, read yardstick "
          f"{r['read_gbps']:.1f} GB/s ({r['read_yardstick']})")
    print(f"peers (f32, cold / warm): numpy {numpy_s * 1e3:.2f} / "
          f"{peers['numpy_warm_s'] * 1e3:.2f} ms ({r['peers_f32']['numpy_gbps']:.1f} GB/s cold), "
          f"torch {torch_s * 1e3:.2f} / {peers['torch_warm_s'] * 1e3:.2f} ms "
          f"({r['peers_f32']['torch_gbps']:.1f} GB/s cold)")
    print(f"{'':6}{'kernels':>8}{'compile s':>10}{'MB':>6}{'stored':>8}{'cold ms':>9}{'warm ms':>9}"
          f"{'GB/s':>7}{'of read':>9}{'vs numpy':>10}{'vs torch':>10}{'vs f32':>8}{'target':>8}")
    for name, c in r["cases"].items():
        print(f"{name:6}{c['kernels']:8}{c['lumos_compile_s']:10.1f}"
              f"{c['weight_bytes'] / 1e6:6.1f}{c['stored_bytes'] / 1e6:8.1f}"
              f"{c['lumos_s'] * 1e3:9.3f}"
              f"{c['lumos_warm_s'] * 1e3:9.3f}{c['lumos_gbps']:7.1f}"
              f"{c['fraction_of_read']:9.0%}{c['speedup_vs_numpy_f32']:10.2f}"
              f"{c['speedup_vs_torch_f32']:10.2f}{c['speedup_vs_lumos_f32']:8.2f}"
              f"{'met' if c['meets_target'] else 'missed':>8}")
    out = Path(__file__).resolve().parent / "results" / "gemv.json"
    out.parent.mkdir(exist_ok=True)  # (not in a fresh clone)
    out.write_text(json.dumps(r, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
