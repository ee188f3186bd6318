"""Benchmark: `lumos serve` under concurrent streaming clients (issue 30).

Starts `lumos serve MODEL --port 0` as a real process (its compile, or its load from the
artifact cache, is the `startup`), then for each level of `--streams` runs that many
clients at once on loopback, each sending `--requests` streaming `/v1/completions` one
after another (greedy, `--max-tokens` tokens, `stream_options.include_usage` for the
token count): a bounded load. Per level: aggregate completion tokens per second over the
level's wall time, the median and worst time to the first token, and the aggregate's
ratio to one stream's (issue 30's target: >= 4x at 8 streams; the server decodes up to
`--slots` requests in one batched step). Peer in the same run: llama.cpp (the
`llama_cpp` module, when installed; 2 threads) decoding the same prompts one after
another in-process, no HTTP: one stream's throughput, the yardstick for a server that
does not batch. Writes
results/serve_load.json.

    .venv/bin/python benchmarks/serve_load.py [--model smollm2 | FILE.gguf]
        [--streams 1 4 8 16] [--requests 2] [--max-tokens 32] [--context 1024] [--slots 8]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import llama_cpp_model

PROMPTS = ["Once upon a time, there was a little", "The capital of France is",
           "Here is a recipe for a simple soup:", "The three laws of motion are",
           "In the year 2050, cities will", "A short poem about the sea:",
           "The best way to learn to program is", "My favourite animal is the"]


def start(args: argparse.Namespace) -> tuple[subprocess.Popen, str, float]:
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lumos.cli", "serve", args.model, "--port", "0", "--name", "bench",
         "--context", str(args.context), "--max-prefill", str(args.max_prefill),
         "--slots", str(args.slots)],
        stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if " at http://" in line:
            url = line.split(" at ", 1)[1].split()[0].removesuffix("/v1")
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, url, time.perf_counter() - t
    raise SystemExit("the server did not start:\n" + "".join(lines[-20:]))


def stream(url: str, prompt: str, max_tokens: int) -> tuple[float, float, int]:
    """One streaming completion: (seconds to the first text, seconds in all, tokens)."""
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    t = time.perf_counter()
    first, tokens = None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(event["error"]["message"])
            if first is None and any(c.get("text") for c in event.get("choices", ())):
                first = time.perf_counter() - t
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    return first if first is not None else math.inf, time.perf_counter() - t, tokens


def level(url: str, n: int, requests: int, max_tokens: int) -> dict:
    def client(k: int) -> list[tuple[float, float, int]]:
        return [stream(url, PROMPTS[(k + r) % len(PROMPTS)], max_tokens)
                for r in range(requests)]
    t = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        done = [x for part in pool.map(client, range(n)) for x in part]
    wall = time.perf_counter() - t
    ttft = [d[0] for d in done]
    return {"streams": n, "requests": len(done), "wall_s": wall,
            "tokens": sum(d[2] for d in done), "aggregate_tok_s": sum(d[2] for d in done) / wall,
            "ttft_median_s": statistics.median(ttft), "ttft_max_s": max(ttft)}


def llama_cpp_peer(path: str, max_tokens: int) -> dict:
    try:
        import llama_cpp
    except ModuleNotFoundError:
        return {"skipped": "llama_cpp is not installed"}
    llm: Any = llama_cpp_model(path, 1024, threads=2)
    t, tokens = time.perf_counter(), 0
    for p in PROMPTS:
        out = llm.create_completion(p, max_tokens=max_tokens, temperature=0.0)
        tokens += out["usage"]["completion_tokens"]
    wall = time.perf_counter() - t
    return {"tok_s": tokens / wall, "tokens": tokens, "wall_s": wall,
            "version": llama_cpp.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--max-prefill", type=int, default=128)
    ap.add_argument("--slots", type=int, default=8, help="the server's --slots")
    ap.add_argument("--peers", nargs="*", default=["llama.cpp"], choices=["llama.cpp"])
    args = ap.parse_args()
    proc, url, startup = start(args)
    try:
        stream(url, PROMPTS[0], 4)  # (first request: buffers allocated)
        levels = [level(url, n, args.requests, args.max_tokens) for n in args.streams]
    finally:
        proc.terminate()
        proc.wait(30)
    one = next((lv["aggregate_tok_s"] for lv in levels if lv["streams"] == 1), None)
    path = args.model
    if args.model == "smollm2":
        from lumos.models.llama import smollm2_path
        path = str(smollm2_path())
    peer = llama_cpp_peer(path, args.max_tokens) if "llama.cpp" in args.peers and \
        path.endswith(".gguf") else {"skipped": "not a GGUF file or not in --peers"}
    print(f"lumos serve {args.model} --slots {args.slots}: startup {startup:.1f} s, "
          f"{args.requests} requests per client, {args.max_tokens} tokens each, "
          f"{os.cpu_count()} CPUs")
    print(f"  {'streams':>7} {'tok/s':>8} {'vs 1':>6} {'vs llama.cpp':>12} "
          f"{'ttft med':>9} {'ttft max':>9}")
    for lv in levels:
        vs1 = f"{lv['aggregate_tok_s'] / one:.2f}x" if one else "-"
        vsl = f"{lv['aggregate_tok_s'] / peer['tok_s']:.2f}x" if "tok_s" in peer else "-"
        print(f"  {lv['streams']:>7} {lv['aggregate_tok_s']:>8.1f} {vs1:>6} {vsl:>12} "
              f"{lv['ttft_median_s'] * 1e3:>7.0f}ms {lv['ttft_max_s'] * 1e3:>7.0f}ms")
    if "tok_s" in peer:
        print(f"  llama.cpp one stream in-process: {peer['tok_s']:.1f} tok/s")
    out = Path(__file__).parent / "results" / "serve_load.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"benchmark": "serve_load", "model": args.model,
                               "cpus": os.cpu_count(), "startup_s": startup,
                               "slots": args.slots,
                               "max_tokens": args.max_tokens, "levels": levels,
                               "llama.cpp": peer}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
