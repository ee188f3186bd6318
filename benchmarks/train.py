"""Benchmark: training steps/s of the small character transformer of examples/train_lm.py.

One step = forward, backward and AdamW update at a fixed batch (same Config as the
example, batch 16, context 32). Timed in the same run: lumos on the CPU runtime without
search (one C kernel per node) and, with `--limit N > 0`, with a small timed search
(bounded by `--search-time` seconds); PyTorch eager and torch.compile (inductor) of the
same loss with torch.optim.AdamW. Medians over `--repeats` steps. Target: lumos >= 1.0x
eager. Run with OMP_WAIT_POLICY=passive (OpenMP threads of the lumos kernels and torch
otherwise spin against each other). Writes results/train.json.

    OMP_WAIT_POLICY=passive .venv/bin/python benchmarks/train.py [--limit 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from common import median_time, openblas_core

import lumos
from lumos.autograd import AdamW, Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_lm  # noqa: E402


def lumos_step(c: train_lm.Config, batch: int, x: np.ndarray, y: np.ndarray,
               options: lumos.CompileOptions | None) -> tuple[float, object]:
    """(compile seconds, a function running one training step)."""
    t0 = time.perf_counter()
    g, P, tok, tgt, _, loss = train_lm.build(c, batch)
    trainer = Trainer(loss, AdamW(list(P.values()), lr=3e-3), lumos.CpuRuntime(), options)
    trainer.load({P[k]: a for k, a in train_lm.init(c, np.random.default_rng(0)).items()})
    return time.perf_counter() - t0, lambda: trainer.step({tok: x, tgt: y})


def torch_step(c: train_lm.Config, x: np.ndarray, y: np.ndarray, compiled: bool):
    import torch

    P = {k: torch.tensor(a, requires_grad=True)
         for k, a in train_lm.init(c, np.random.default_rng(0)).items()}
    opt = torch.optim.AdamW(list(P.values()), lr=3e-3)
    tx, ty = torch.tensor(x), torch.tensor(y)
    ops = train_lm.torch_ops()

    def loss_fn(P: dict, tx: torch.Tensor, ty: torch.Tensor) -> torch.Tensor:
        return train_lm.torch_loss(c, P, tx, ty, ops)

    fn = torch.compile(loss_fn) if compiled else loss_fn

    def step() -> float:
        opt.zero_grad()
        loss = fn(P, tx, ty)
        loss.backward()
        opt.step()
        return loss.item()

    t0 = time.perf_counter()
    step()  # torch.compile compiles here
    return time.perf_counter() - t0, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--limit", type=int, default=0, help="search candidates (0: no search)")
    ap.add_argument("--search-time", type=float, default=300.0)
    args = ap.parse_args()
    text = train_lm.corpus()
    chars = sorted(set(text))
    ids = np.array([chars.index(ch) for ch in text], np.int64)
    c = train_lm.Config(vocab=len(chars))
    x, y = next(train_lm.batches(ids, c.ctx, args.batch, np.random.default_rng(0)))

    runs = {"lumos_cpu": lambda: lumos_step(c, args.batch, x, y, None),
            "torch_eager": lambda: torch_step(c, x, y, False),
            "torch_compile": lambda: torch_step(c, x, y, True)}
    if args.limit > 0:
        opts = lumos.CompileOptions(limit=args.limit, search_time_limit=args.search_time)
        runs["lumos_cpu_search"] = lambda: lumos_step(c, args.batch, x, y, opts)
    rows = {}
    for name, make in runs.items():
        compile_s, step = make()
        s = median_time(step, args.repeats, warmup=2)
        rows[name] = {"compile_s": compile_s, "step_s": s, "steps_per_s": 1 / s}
    eager = rows["torch_eager"]["step_s"]
    print(f"{'':18s} {'steps/s':>9s} {'vs eager':>9s} {'compile s':>10s}")
    for name, r in rows.items():
        r["ratio_vs_eager"] = eager / r["step_s"]
        print(f"{name:18s} {r['steps_per_s']:9.2f} {r['ratio_vs_eager']:9.3f} "
              f"{r['compile_s']:10.1f}")

    out = {"benchmark": "train", "model": vars(c) | {"batch": args.batch},
           "search_limit": args.limit, "repeats": args.repeats, "cpus": os.cpu_count(),
           "load_average_1min": os.getloadavg()[0], "openblas_core": openblas_core(),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
           "target": {"lumos_ratio_vs_eager": 1.0}, "results": rows}
    path = Path(__file__).parent / "results" / "train.json"
    path.parent.mkdir(exist_ok=True)  # (not in a fresh clone)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
