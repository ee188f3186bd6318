"""Benchmark: compile time of one SmolLM2-shaped block with a search (issue 4).

The graph is benchmarks/smollm2_graph.py with one layer (embedding, one decoder block,
final norm, LM head; random weights) at a fixed sequence length per run (a dim bucket
(s, s, s): prefill s=128 and decode s=1 by default). lumos compiles it with
`CompileOptions(limit=--limit)`, cold: LUMOS_ARTIFACTS=off and a fresh LUMOS_CACHE, so
every object is compiled (`--cache DIR` reuses DIR instead: run twice for a warm one).
Reported: saturation (`build_spaces`) and search (`tune`) seconds and the total; inside
the search the seconds spent decoding genomes, generating C, in the C compiler, making
the profiling inputs and reference outputs, and in the sandbox (its start and checking
candidates; timing them); candidates counted / rejected / invalid, counted candidates per
search second, and the best candidate's time against the baseline's (both as the search
timed them). Phases are timed by wrapping the runtime's functions; the runtime is not
edited.

Peer: inductor's cold compile of the same block written in PyTorch (first call of
`torch.compile`, after `torch._dynamo.reset()`, with a fresh TORCHINDUCTOR_CACHE_DIR
(DIR/inductor with --cache), default options, static shapes). Inductor's modules are
imported before the clock starts (lumos is imported too). Then the runtime of both
(median of --repeats) and the largest difference of their logits relative to the
largest logit. Target: lumos total <= 60 s per sequence length at --limit 100.
Writes benchmarks/results/compile_time.json.

    .venv/bin/python benchmarks/compile_time.py [--limit 100] [--seq 128,1] [--cache DIR]
        [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["LUMOS_ARTIFACTS"] = "off"  # nothing is loaded from the artifact cache
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # before any OpenMP runtime loads

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from common import median_time  # noqa: E402
from smollm2_graph import CONFIG, build  # noqa: E402

import lumos  # noqa: E402
import lumos.runtime.cpu.program as program_module  # noqa: E402
import lumos.runtime.cpu.tune as tune_module  # noqa: E402
from lumos.frontend.tensor import Tensor  # noqa: E402
from lumos.runtime.cpu import CpuRuntime  # noqa: E402
from lumos.runtime.cpu.isolate import Sandbox  # noqa: E402
from lumos.search import CompileOptions, GeneticSearch, Measured, Outcome, Rejected  # noqa: E402
from lumos.search.genome import Genome  # noqa: E402
from lumos.shape.view import View  # noqa: E402

TARGET_S = 60.0


def weights(g: lumos.Graph, seed: int) -> dict[str, np.ndarray]:
    """Random data for every input: token ids, norm weights near 1, other weights
    N(0, 0.02) (logits of a sane magnitude)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, nid in g.inputs.items():
        if name == "tokens":
            continue
        shape = tuple(e.value for e in g.nodes[nid].shape)
        w = rng.standard_normal(shape).astype(np.float32)
        out[name] = 1 + 0.1 * w if "norm" in name else 0.02 * w
    return out


class Block(torch.nn.Module):
    """smollm2_graph.build(layers=1) in PyTorch, on the same named weights."""

    def __init__(self, w: dict[str, np.ndarray]) -> None:
        super().__init__()
        for name, a in w.items():
            self.register_buffer(name.replace(".", "_"), torch.from_numpy(a))

    def w(self, name: str) -> torch.Tensor:
        return getattr(self, name.replace(".", "_") + "_weight")

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        c = CONFIG
        d, nh, nkv, eps = c["d"], c["heads"], c["kv_heads"], c["eps"]
        hd = d // nh
        half, s = hd // 2, tokens.shape[0]
        inv_freq = torch.exp2(torch.arange(half, dtype=torch.float32)
                              * (-2.0 * math.log2(c["rope_theta"]) / hd))
        freqs = torch.arange(s, dtype=torch.float32)[:, None] * inv_freq[None]
        angles = torch.cat([freqs, freqs], -1)
        cos, sin = angles.cos(), angles.sin()

        def rope(t: torch.Tensor) -> torch.Tensor:
            return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

        x = F.embedding(tokens, self.w("token_embd"))
        h = F.rms_norm(x, (d,), self.w("blk.0.attn_norm"), eps)
        q = F.linear(h, self.w("blk.0.attn_q")).reshape(s, nh, hd).transpose(0, 1)
        k = F.linear(h, self.w("blk.0.attn_k")).reshape(s, nkv, hd).transpose(0, 1)
        v = F.linear(h, self.w("blk.0.attn_v")).reshape(s, nkv, hd).transpose(0, 1)
        a = F.scaled_dot_product_attention(rope(q)[None], rope(k)[None], v[None],
                                           is_causal=True, enable_gqa=True)[0]
        x = x + F.linear(a.transpose(0, 1).reshape(s, d), self.w("blk.0.attn_output"))
        h = F.rms_norm(x, (d,), self.w("blk.0.ffn_norm"), eps)
        gate = F.silu(F.linear(h, self.w("blk.0.ffn_gate")))
        x = x + F.linear(gate * F.linear(h, self.w("blk.0.ffn_up")), self.w("blk.0.ffn_down"))
        x = F.rms_norm(x, (d,), self.w("output_norm"), eps)
        return F.linear(x, self.w("token_embd"))


class Probe:
    """Wraps the runtime's phases (by patching module attributes) and adds up their
    seconds; keeps the search and its outcomes in order (the first is the baseline's)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.outcomes: list[Outcome] = []
        self.search: GeneticSearch | None = None
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, module: Any, name: str, phase: str) -> None:
        real = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if phase == "search":
                self.search = args[1]
            key = phase if phase != "sandbox" else \
                "timing" if args[1] is tune_module.timed else "check"
            t = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t
        self._undo.append((module, name, real))
        setattr(module, name, timed)

    def __enter__(self) -> Probe:
        self.wrap(program_module, "build_spaces", "saturation")
        self.wrap(tune_module, "tune", "search")
        self.wrap(program_module, "from_genome", "decode")
        self.wrap(program_module, "generate", "codegen")
        self.wrap(program_module, "compile_units", "cc")
        self.wrap(tune_module, "profiling_inputs", "inputs")
        self.wrap(tune_module, "run_hlir", "reference")
        self.wrap(Sandbox, "run", "sandbox")
        real_report = GeneticSearch.report

        def report(search: GeneticSearch, genome: Genome, outcome: Outcome) -> None:
            self.outcomes.append(outcome)
            real_report(search, genome, outcome)
        self._undo.append((GeneticSearch, "report", real_report))
        GeneticSearch.report = report  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        for module, name, real in reversed(self._undo):
            setattr(module, name, real)


def lumos_compile(seq: int, limit: int, cache: Path, data: dict[str, np.ndarray],
                  tokens: np.ndarray, repeats: int) -> tuple[dict, np.ndarray]:
    os.environ["LUMOS_CACHE"] = str(cache)
    g, logits = build(layers=1)
    opts = CompileOptions(limit=limit, dim_buckets={"s": [(seq, seq, seq)]})
    with Probe() as probe:
        t = time.perf_counter()
        prog = g.compile(CpuRuntime(), opts)
        total = time.perf_counter() - t
    search, sec = probe.search, probe.seconds
    assert search is not None
    for name, nid in g.inputs.items():
        node = g.nodes[nid]
        prog.set_data(Tensor(g, nid, View.contiguous(node.shape), node.dtype),
                      tokens if name == "tokens" else data[name])
    runtime = median_time(prog.execute, repeats)
    base = probe.outcomes[0] if probe.outcomes else None
    best = search.best()
    objects = len(list((cache / "cpu").glob("*.o")))
    result = {
        "total_s": total, "saturation_s": sec.get("saturation", 0.0),
        "search_s": sec.get("search", 0.0), "decode_s": sec.get("decode", 0.0),
        "codegen_s": sec.get("codegen", 0.0), "cc_s": sec.get("cc", 0.0),
        "inputs_s": sec.get("inputs", 0.0), "reference_s": sec.get("reference", 0.0),
        "check_s": sec.get("check", 0.0), "timing_s": sec.get("timing", 0.0),
        "counted": search.counted, "rejected": search.rejected,
        "candidates_per_s": search.counted / max(sec.get("search", 0.0), 1e-9),
        "objects_compiled": objects, "stop_reason": search.stop_reason,
        "baseline_s": base.seconds if isinstance(base, Measured) else None,
        "best_s": best[1] if best else None, "runtime_s": runtime,
        "first_rejected": next((o.reason[:300] for o in probe.outcomes
                                if isinstance(o, Rejected)), None),
        "invalid_reasons": [o.reason[:300] for o in probe.outcomes
                            if not isinstance(o, Measured | Rejected)],
    }
    return result, np.array(prog.get(logits))


def inductor_compile(seq: int, cache: Path, block: Block, tokens: torch.Tensor,
                     repeats: int) -> tuple[dict, np.ndarray]:
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    torch._dynamo.reset()
    with temporary_cache_dir(str(cache)), torch.no_grad():
        f = torch.compile(block, backend="inductor", dynamic=False)
        t = time.perf_counter()
        out = f(tokens)
        cold = time.perf_counter() - t
        runtime = median_time(lambda: f(tokens), repeats)
        eager = median_time(lambda: block(tokens), repeats)
    return {"compile_s": cold, "runtime_s": runtime, "eager_runtime_s": eager}, out.numpy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--seq", default="128,1", help="comma-separated sequence lengths")
    ap.add_argument("--cache", type=Path, help="reuse this cache dir (default: fresh)")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    import torch._inductor.compile_fx  # noqa: F401  (imports are not compile time)

    g, _ = build(layers=1)
    data = weights(g, seed=0)
    block = Block(data).eval()
    vocab = CONFIG["vocab"]
    rows = []
    for seq in (int(s) for s in args.seq.split(",")):
        tokens = np.random.default_rng(seq).integers(0, vocab, seq).astype(np.int32)
        root = args.cache or Path(tempfile.mkdtemp(prefix="lumos-compile-time-"))
        try:
            lu, got = lumos_compile(seq, args.limit, root / f"lumos-s{seq}", data, tokens,
                                    args.repeats)
            ind, want = inductor_compile(seq, root / f"inductor-s{seq}", block,
                                         torch.from_numpy(tokens).long(), args.repeats)
        finally:
            if args.cache is None:
                shutil.rmtree(root, ignore_errors=True)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        rows.append({"seq": seq, "lumos": lu, "inductor": ind, "logits_rel_err": err,
                     "compile_ratio": lu["total_s"] / ind["compile_s"],
                     "runtime_ratio": ind["runtime_s"] / lu["runtime_s"]})
    report(rows, args)


def report(rows: list[dict], args: argparse.Namespace) -> None:
    def line(label: str, get: Callable[[dict], Any], fmt: str = "{:>12.3f}") -> None:
        cells = []
        for r in rows:
            v = get(r)
            cells.append(f"{'-':>12}" if v is None else
                         fmt.format(v) if not isinstance(v, str) else f"{v:>12}")
        print(f"{label:<34}" + "".join(cells))

    print(f"one SmolLM2-shaped block, search limit {args.limit}, "
          f"cache {'cold' if args.cache is None else args.cache}")
    line("sequence length", lambda r: r["seq"], "{:>12d}")
    line("lumos saturation (s)", lambda r: r["lumos"]["saturation_s"])
    line("lumos search (s)", lambda r: r["lumos"]["search_s"])
    line("  decode genomes (s)", lambda r: r["lumos"]["decode_s"])
    line("  generate C (s)", lambda r: r["lumos"]["codegen_s"])
    line("  C compiler (s)", lambda r: r["lumos"]["cc_s"])
    line("  profiling inputs (s)", lambda r: r["lumos"]["inputs_s"])
    line("  reference outputs (run_hlir) (s)", lambda r: r["lumos"]["reference_s"])
    line("  sandbox: start + check (s)", lambda r: r["lumos"]["check_s"])
    line("  sandbox: timing (s)", lambda r: r["lumos"]["timing_s"])
    line("lumos total (s)", lambda r: r["lumos"]["total_s"])
    line("  target (s)", lambda r: TARGET_S, "{:>12.0f}")
    line("candidates counted", lambda r: r["lumos"]["counted"], "{:>12d}")
    line("candidates rejected", lambda r: r["lumos"]["rejected"], "{:>12d}")
    line("candidates invalid", lambda r: len(r["lumos"]["invalid_reasons"]), "{:>12d}")
    line("counted candidates / search s", lambda r: r["lumos"]["candidates_per_s"])
    line("objects compiled", lambda r: r["lumos"]["objects_compiled"], "{:>12d}")
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    line("baseline, as timed (ms)", lambda r: ms(r["lumos"]["baseline_s"]))
    line("best, as timed (ms)", lambda r: ms(r["lumos"]["best_s"]))
    line("lumos runtime (ms)", lambda r: ms(r["lumos"]["runtime_s"]))
    line("inductor cold compile (s)", lambda r: r["inductor"]["compile_s"])
    line("inductor runtime (ms)", lambda r: ms(r["inductor"]["runtime_s"]))
    line("eager runtime (ms)", lambda r: ms(r["inductor"]["eager_runtime_s"]))
    line("compile: lumos / inductor", lambda r: r["compile_ratio"], "{:>11.2f}x")
    line("runtime: inductor / lumos", lambda r: r["runtime_ratio"], "{:>11.2f}x")
    line("logits rel. difference", lambda r: r["logits_rel_err"], "{:>12.1e}")
    result = {"limit": args.limit, "cache": "cold" if args.cache is None else "given",
              "target": f"lumos total_s <= {TARGET_S:g} at limit 100",
              "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
              "omp_wait_policy": os.environ["OMP_WAIT_POLICY"], "rows": rows}
    out = Path(__file__).resolve().parent / "results" / "compile_time.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
