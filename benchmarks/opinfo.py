"""Benchmark: PyTorch's OpInfo samples through torch.compile(backend="lumos", strict),
inductor on the same samples as the anchor.

The op list, the samples (the first two of each of float32, int64 and bool an op
supports) and the comparison with eager are tests/torch/opinfo.py's (its docstring says
which ops are left out and why). Prints a table (pass rate per op, lumos' first failure)
and the overall pass rates, and writes benchmarks/results/opinfo.json (per sample:
op, dtype, index, and each peer's pass and reason). A sample eager itself rejects is not
counted. lumos runs strictly (a fallback to PyTorch counts as a failure) on `--runtime`
("cpu", the backend's default, generates C; "reference" is the numpy oracle: only the
translations). `--quick` runs a slice of a dozen ops and writes no JSON.

    .venv/bin/python benchmarks/opinfo.py [--runtime cpu|reference] [--peers lumos,inductor]
        [--per-dtype 2] [--ops NAME,...] [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tests.torch import opinfo  # noqa: E402

QUICK = ["abs", "asin", "atan2", "bitwise_xor", "cummax", "sum", "topk", "gather",
         "scatter_add", "matmul", "nn.functional.conv_transpose2d", "nn.functional.max_pool2d"]
TIMEOUT = 300  # seconds for one sample (a compile that hangs counts as a failure)


class _Timeout(Exception):
    pass


def _alarm(*_: Any) -> None:
    raise _Timeout(f"timed out after {TIMEOUT} s")


def run_peer(peer: str, s: opinfo.Sample, runtime: str) -> opinfo.Outcome:
    if peer == "lumos":
        # (the two seed programs, not the default search: what is translated, not how
        # fast it runs, is measured here)
        backend, options = "lumos", {"strict": True, "runtime": runtime, "limit": 2}
    else:
        backend, options = peer, None
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT)
    try:
        return opinfo.run(s, backend=backend, options=options)
    except _Timeout as e:
        return opinfo.Outcome(False, str(e))
    except Exception as e:  # the harness itself: counted as a failure, with its reason
        return opinfo.Outcome(False, f"{type(e).__name__}: {e}"[:300])
    finally:
        signal.alarm(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", default="cpu", choices=["cpu", "reference"])
    ap.add_argument("--peers", default="lumos,inductor")
    ap.add_argument("--per-dtype", type=int, default=opinfo.PER_DTYPE)
    ap.add_argument("--ops", default="", help="comma-separated op names (default: the list)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "opinfo.json"))
    args = ap.parse_args()
    peers = args.peers.split(",")
    names = QUICK if args.quick else (args.ops.split(",") if args.ops else list(opinfo.op_list()))
    rows: list[dict[str, Any]] = []
    start = time.time()
    for name in names:
        for s in opinfo.samples(name, args.per_dtype):
            row: dict[str, Any] = {"op": name, "dtype": str(s.dtype).removeprefix("torch."),
                                   "index": s.index}
            for peer in peers:
                o = run_peer(peer, s, args.runtime)
                row[peer] = {"ok": o.ok, "reason": o.reason}
            rows.append(row)
            print(s.id, *(f"{p}={'ok' if row[p]['ok'] else 'FAIL'}" for p in peers),
                  file=sys.stderr, flush=True)  # progress: a long run can be read as it goes
    counted = [r for r in rows if not r[peers[0]]["reason"].startswith("eager:")]
    table = _table(counted, peers)
    print(table)
    total = {p: sum(r[p]["ok"] for r in counted) for p in peers}
    for p in peers:
        print(f"{p}: {total[p]}/{len(counted)} samples pass "
              f"({100 * total[p] / max(len(counted), 1):.1f}%)")
    print(f"{len(names)} ops, {len(counted)} samples, {time.time() - start:.0f} s")
    if args.quick:
        return
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "runtime": args.runtime, "peers": peers, "per_dtype": args.per_dtype,
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
        "ops": len(names), "samples": len(counted),
        "pass": {p: total[p] for p in peers},
        "pass_rate": {p: total[p] / max(len(counted), 1) for p in peers},
        "excluded": opinfo.EXCLUDED, "rows": rows}, indent=1))
    print(f"wrote {out}")


def _table(rows: list[dict[str, Any]], peers: list[str]) -> str:
    """One line per op: samples, each peer's passes, lumos' first failure."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["op"], []).append(r)
    head = f"| op | samples | {' | '.join(peers)} | first {peers[0]} failure |"
    lines = [head, "|" + "---|" * (len(peers) + 3)]
    for op, rs in by.items():
        passes = [sum(r[p]["ok"] for r in rs) for p in peers]
        fail = next((r[peers[0]]["reason"] for r in rs if not r[peers[0]]["ok"]), "")
        lines.append(f"| {op} | {len(rs)} | " + " | ".join(map(str, passes))
                     + f" | {fail[:120]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
