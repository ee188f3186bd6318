"""Benchmark: whole models on lumos against peers on the same weights (issue 5).

    smollm2   SmolLM2-135M-Instruct, GGUF Q4_1: decode tok/s after a 16-token prompt (32
              steps), prefill latency of 128 tokens, and the bytes a decode step reads
              with the fraction of the DRAM read bandwidth they imply. Peers: llama.cpp
              (the `llama_cpp` module, when installed), transformers fp32 eager and
              transformers + torch.compile (both on the GGUF's dequantized weights, a
              static KV cache, logits of the last token only).
    minilm    all-MiniLM-L6-v2, a batch of 32 x 128 tokens: sentences/s. Peers: torch eager
              (transformers' BertModel + the same pooling), inductor, onnxruntime (when
              installed; the eager model exported to ONNX). Again at PyTorch's "high"
              float32 matmul precision, lumos (CompileOptions.matmul_precision: bf16x3
              products on AMX where the CPU has them) against inductor compiled and run
              under torch.set_float32_matmul_precision("high") ("... high").
    mobilenet MobileNetV2, a batch of 8 x 224x224: images/s. Peers: torch eager, inductor.
              lumos with CompileOptions.flush_denormals (subnormals as zero: 2 of 32
              running means of the first block's batch norm are subnormal, and each
              operation on one costs a microcode assist on Intel cores; inductor's
              freezing folds them into constants), and again without it ("lumos exact").

lumos runs through the library's own entry points (`lumos.cli.llm.bench_llm`, the
SentenceEncoder and Classifier); `--search N` times N candidates per dim bucket
(default 2: the CPU runtime's two fused seeds; 0: the unsearched
baseline; a compile that finds the program in the artifact cache is quick:
LUMOS_ARTIFACTS=off compiles anew). Its output is checked against the eager peer's before any
timing counts. Every system is timed in the same run: SmolLM2's one after another
(medians of `--rounds`), MiniLM's and MobileNetV2's in turns (`--rounds` rounds of at
least 1 s of calls each: common.interleaved, so that a slow spell of the shared machine
falls on all alike; onnxruntime after them); ratios are lumos' throughput over the
peer's (> 1: lumos is faster). Inductor compiles with freezing (weights as constants),
its fastest inference setting on CPU; glibc's malloc keeps freed memory
(common.keep_freed_memory: PyTorch's per-call tensors are not faulted in again each
call). A model or peer
that fails records its error and the run goes on. OpenMP keeps its default wait policy
(recorded; threads spin briefly between parallel regions, as users get it): a SmolLM2
decode step runs ~200 parallel kernels, and with OMP_WAIT_POLICY=passive each wakes its
threads (a step took 23.8 ms on 2 threads vs 8.2 ms with spinning, 12.3 ms on 1 thread).
Writes results/models.json. A full run takes 10-20 minutes on 2 cores.

    .venv/bin/python benchmarks/models.py [--models smollm2 minilm mobilenet]
        [--gguf FILE] [--context 256] [--prompt 16]
        [--runtime cpu|reference] [--search 2] [--rounds 3] [--peers ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import (
    interleaved,
    keep_freed_memory,
    llama_cpp_model,
    median_time,
    openblas_core,
    read_bandwidth,
)

from lumos.search import CompileOptions

PROMPT, PREFILL, DECODE = 16, 128, 32
MINILM_BATCH, MINILM_SEQ, MOBILENET_BATCH = 32, 128, 8
PEERS = ("llama.cpp", "eager", "inductor", "onnxruntime")
# measure -> (unit, whether higher is better)
MEASURES = {"decode_tok_s": ("tok/s", True), "prefill_s": ("ms", False),
            "sentences_s": ("sent/s", True), "images_s": ("img/s", True)}


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip()[:300]}"


def runtime(name: str) -> Any:
    from lumos.runtime import CpuRuntime, ReferenceRuntime

    return CpuRuntime() if name == "cpu" else ReferenceRuntime()


def options(search: int, buckets: dict[str, list[tuple[int, int, int]]],
            matmul_precision: str = "highest", saturation: float | None = None) -> Any:
    """The search's options (timing at the benchmarked sizes), or None for no search;
    `saturation`: the e-graph's time limit, if not the default."""
    more = {} if saturation is None else {"saturation_time_limit": saturation}
    return CompileOptions(limit=search, dim_buckets=buckets,
                          matmul_precision=matmul_precision, **more) if search else None


def peer(systems: dict, name: str, wanted: set[str], fn: Callable[[], dict]) -> None:
    """Run one peer's measurement into `systems[name]`: its numbers, or why it has none."""
    if not wanted & set(name.split(" ")):
        systems[name] = {"skipped": "not in --peers"}
        return
    try:
        systems[name] = fn()
    except ImportError as e:
        systems[name] = {"skipped": f"not installed ({e.name or e})"}
    except Exception as e:  # record, and go on with the other peers
        systems[name] = {"error": error_text(e)}


def prepare(systems: dict, calls: dict, name: str, wanted: set[str],
            make: Callable[[], tuple[Callable[[], Any], dict]]) -> None:
    """Set up one peer for `rates`: `make` gives its timed call and what else it reports
    (its first call made); a peer not wanted, not installed or failing records why."""
    if not wanted & set(name.split(" ")):
        systems[name] = {"skipped": "not in --peers"}
        return
    try:
        calls[name], systems[name] = make()
    except ImportError as e:
        systems[name] = {"skipped": f"not installed ({e.name or e})"}
    except Exception as e:  # record, and go on with the other peers
        systems[name] = {"error": error_text(e)}


def rates(systems: dict, calls: dict[str, Callable[[], Any]], measure: str, batch: int,
          rounds: int) -> None:
    """Every prepared call timed in turns (common.interleaved: `rounds` rounds, at least 3 s
    of calls each): `measure` = batch / its median time."""
    for name, t in interleaved(calls, rounds, least=3.0, rounds=rounds).items():
        systems[name][measure] = batch / t


def no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` run under torch.no_grad() (a peer's timed call)."""
    import torch

    def call() -> Any:
        with torch.no_grad():
            return fn()
    return call


def inductor(fn: Callable, *args: Any) -> tuple[Callable, float]:
    """fn compiled with torch.compile (inductor), and the seconds its first call took."""
    import torch

    compiled = torch.compile(fn, backend="inductor", dynamic=False)
    t0 = time.perf_counter()
    compiled(*args)
    return compiled, time.perf_counter() - t0


# -- SmolLM2 --------------------------------------------------------------------------------

def hf_llm(m: Any, prompt: list[int], prefill: list[int], steps: list[int],
           rounds: int, context: int) -> dict:
    """transformers' prefill latency (one forward, no cache) and decode tok/s (a static
    cache: the prompt, then one token per step), logits of the last token only."""
    import torch
    from transformers import StaticCache

    cache = StaticCache(config=m.config, max_cache_len=context)
    ids = torch.tensor([prefill])

    def decode() -> float:
        cache.reset()
        m(input_ids=torch.tensor([prompt]), past_key_values=cache, use_cache=True,
          cache_position=torch.arange(len(prompt)), logits_to_keep=1)
        t0 = time.perf_counter()
        for i, t in enumerate(steps):
            m(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True,
              cache_position=torch.tensor([len(prompt) + i]), logits_to_keep=1)
        return len(steps) / (time.perf_counter() - t0)

    with torch.no_grad():
        t0 = time.perf_counter()
        m(ids, use_cache=False, logits_to_keep=1)
        decode()
        first_s = time.perf_counter() - t0  # includes compiling, when compiled
        prefill_s = median_time(lambda: m(ids, use_cache=False, logits_to_keep=1), rounds)
        tok_s = float(np.median([decode() for _ in range(rounds)]))
    return {"decode_tok_s": tok_s, "prefill_s": prefill_s, "first_calls_s": first_s}


def llama_cpp_llm(path: Path, prompt: list[int], prefill: list[int], steps: list[int],
                  rounds: int, context: int) -> dict:
    """llama.cpp through llama-cpp-python, one thread per CPU (common.llama_cpp_model)."""
    import llama_cpp

    t0 = time.perf_counter()
    llm: Any = llama_cpp_model(str(path), context)
    load_s = time.perf_counter() - t0

    def run_prefill() -> None:
        llm.reset()
        llm.eval(prefill)

    def decode() -> float:
        llm.reset()
        llm.eval(prompt)
        t0 = time.perf_counter()
        for t in steps:
            llm.eval([t])
        return len(steps) / (time.perf_counter() - t0)

    decode()
    return {"decode_tok_s": float(np.median([decode() for _ in range(rounds)])),
            "prefill_s": median_time(run_prefill, rounds), "load_s": load_s,
            "version": getattr(llama_cpp, "__version__", "?")}


def smollm2(args: argparse.Namespace, read_bps: float) -> dict:
    from lumos.cli.llm import bench_llm
    from lumos.generate import Generator
    from lumos.models import llama

    pre = llama.load(args.gguf or llama.smollm2_path(), max_context=args.context)
    t0 = time.perf_counter()
    gen = Generator(pre.model, pre.state, runtime(args.runtime), max_prefill=PREFILL,
                    options=options(args.search, {}, saturation=args.saturation_limit))
    compile_s = time.perf_counter() - t0
    lumos = bench_llm(pre, gen, args.prompt, PREFILL, DECODE, args.rounds)
    lumos["compile_s"] = compile_s
    rng = np.random.default_rng(1)
    vocab = pre.model.config.vocab_size
    prompt, prefill, steps = (rng.integers(3, vocab, n).tolist() for n in (args.prompt, PREFILL,
                                                                           DECODE))
    gen.reset()
    got = gen(prompt)
    r: dict = {"what": f"decode after a {args.prompt}-token prompt ({DECODE} steps), prefill of "
                       f"{PREFILL} tokens", "systems": {"lumos": lumos}}
    r["decode_bytes_per_token"] = lumos["bytes_per_token"]
    r["decode_fraction_of_read_bandwidth"] = lumos["bytes_per_token"] * \
        lumos["decode_tok_s"] / read_bps
    del gen
    wanted = set(args.peers)
    peer(r["systems"], "llama.cpp", wanted,
         lambda: llama_cpp_llm(pre.path, prompt, prefill, steps, args.rounds, args.context))

    import torch
    from transformers import AutoModelForCausalLM

    # the file's own architecture (Qwen2's attention has biases, Gemma its norms, ...)
    m = AutoModelForCausalLM.from_pretrained(pre.path.parent, gguf_file=pre.path.name,
                                             dtype=torch.float32,
                                             attn_implementation="eager").eval()
    r["check_model"] = type(m).__name__
    with torch.no_grad():
        want = m(torch.tensor([prompt]), logits_to_keep=1).logits[0, -1].numpy()
    rel = float(np.abs(got - want).max() / np.abs(want).max())
    r["check"] = {"vs": "transformers eager, logits after the prompt",
                  "max_rel_err": rel, "tolerance": 1e-3, "ok": rel < 1e-3}
    peer(r["systems"], "transformers eager", wanted,
         lambda: hf_llm(m, prompt, prefill, steps, args.rounds, args.context))

    def compiled() -> dict:
        m.forward = torch.compile(m.forward, backend="inductor", dynamic=False)
        return hf_llm(m, prompt, prefill, steps, args.rounds, args.context)

    peer(r["systems"], "transformers inductor", wanted, compiled)
    return r


# -- MiniLM ---------------------------------------------------------------------------------

def minilm(args: argparse.Namespace, read_bps: float) -> dict:
    import torch
    from transformers import BertModel

    from lumos.models import bert
    from lumos.models.packages import package_dir

    folder = package_dir(bert.PACKAGE) / "model"
    ids = np.random.default_rng(0).integers(1000, 30000, (MINILM_BATCH, MINILM_SEQ))
    mask = np.ones_like(ids)
    r: dict = {"what": f"batch {MINILM_BATCH} x {MINILM_SEQ} tokens", "systems": {}}
    calls: dict[str, Callable[[], Any]] = {}
    got = {}
    for name, precision in (("lumos", "highest"), ("lumos high", "high")):
        t0 = time.perf_counter()
        enc = bert.SentenceEncoder(folder, runtime(args.runtime), MINILM_BATCH, options(
            args.search, {"batch": [(1, MINILM_BATCH, MINILM_BATCH)],
                          "seq": [(1, 512, MINILM_SEQ)]}, precision))
        r["systems"][name] = {"compile_s": time.perf_counter() - t0}
        got[name] = enc.embed(ids, mask).copy()
        calls[name] = functools.partial(enc.embed, ids, mask)

    class Embed(torch.nn.Module):
        """BertModel, then sentence-transformers' mean pooling and normalization."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel.from_pretrained(folder, add_pooling_layer=False).eval()

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            states = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(states.dtype)
            mean = (states * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=-1)

    model, tid, tmask = Embed(), torch.from_numpy(ids), torch.from_numpy(mask)
    with torch.no_grad():
        want = model(tid, tmask).numpy()
    err = float(np.abs(got["lumos"] - want).max())
    r["check"] = {"vs": "transformers BertModel + pooling", "max_abs_err": err,
                  "tolerance": 1e-4, "ok": err < 1e-4}
    err = float(np.abs(got["lumos high"] - want).max())
    r["check_high"] = {"max_abs_err": err, "tolerance": 1e-4, "ok": err < 1e-4}

    def compiled() -> tuple[Callable[[], Any], dict]:
        with torch.no_grad():
            fn, first_s = inductor(model, tid, tmask)
        return no_grad(lambda: fn(tid, tmask)), {"first_call_s": first_s}

    def compiled_high() -> tuple[Callable[[], Any], dict]:
        """Inductor compiled and run under PyTorch's "high" float32 matmul precision (a
        model of its own: Dynamo's guards do not cover the setting)."""
        other = Embed()

        def call() -> Any:
            saved = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision("high")
            try:
                with torch.no_grad():
                    return fn(tid, tmask)
            finally:
                torch.set_float32_matmul_precision(saved)
        torch.set_float32_matmul_precision("high")
        try:
            with torch.no_grad():
                fn, first_s = inductor(other, tid, tmask)
        finally:
            torch.set_float32_matmul_precision("highest")
        return call, {"first_call_s": first_s}

    def ort() -> tuple[Callable[[], Any], dict]:
        import onnxruntime

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "minilm.onnx"
            torch.onnx.export(model, (tid, tmask), str(path), input_names=["ids", "mask"],
                              output_names=["embedding"], dynamo=False)
            so = onnxruntime.SessionOptions()
            so.intra_op_num_threads = os.cpu_count() or 1
            sess = onnxruntime.InferenceSession(str(path), so,
                                                providers=["CPUExecutionProvider"])
        feed = {"ids": ids.astype(np.int64), "mask": mask.astype(np.int64)}
        out = sess.run(None, feed)[0]
        return lambda: sess.run(None, feed), {
            "max_abs_err_vs_eager": float(np.abs(out - want).max()),
            "version": onnxruntime.__version__}

    wanted, systems = set(args.peers), r["systems"]
    prepare(systems, calls, "torch eager", wanted,
            lambda: (no_grad(lambda: model(tid, tmask)), {}))
    prepare(systems, calls, "torch inductor", wanted, compiled)
    prepare(systems, calls, "torch inductor high", wanted, compiled_high)
    rates(systems, calls, "sentences_s", MINILM_BATCH, args.rounds)
    # onnxruntime on its own, last: in turns, its threads (spinning after each run) made
    # PyTorch's next calls slower (eager 62 -> 39 sentences/s, inductor 63 -> 43)
    alone: dict[str, Callable[[], Any]] = {}
    prepare(systems, alone, "onnxruntime", wanted, ort)
    rates(systems, alone, "sentences_s", MINILM_BATCH, args.rounds)
    return r


# -- MobileNetV2 ----------------------------------------------------------------------------

def mobilenet(args: argparse.Namespace, read_bps: float) -> dict:
    import torch

    from lumos.models import mobilenet as mn
    from lumos.models import mobilenet_torch
    from lumos.models.packages import package_dir

    weights = package_dir(mn.PACKAGE) / mn.WEIGHTS
    opts = options(args.search, {"batch": [(1, MOBILENET_BATCH, MOBILENET_BATCH)]})
    x = np.random.default_rng(0).standard_normal((MOBILENET_BATCH, 3, 224, 224), np.float32)
    r: dict = {"what": f"batch {MOBILENET_BATCH} x 3x224x224, softmax probabilities",
               "systems": {}}
    calls: dict[str, Callable[[], Any]] = {}
    # lumos flushes subnormals (its batch norms' running means hold some: inductor's freezing
    # folds them into constants), and again as compiled by default ("lumos exact")
    flushes = {"lumos": True, "lumos exact": False} if opts is not None else {"lumos": False}
    for name, flush in flushes.items():
        t0 = time.perf_counter()
        clf = mn.Classifier(weights, runtime(args.runtime), MOBILENET_BATCH,
                            dataclasses.replace(opts, flush_denormals=flush) if flush else opts)
        r["systems"][name] = {"compile_s": time.perf_counter() - t0, "flush_denormals": flush}
        calls[name] = functools.partial(clf.probabilities, x)
        if name == "lumos":
            got = clf.probabilities(x).copy()
    model, tx = mobilenet_torch.load(weights), torch.from_numpy(x)
    probs = lambda a: model(a).softmax(-1)
    with torch.no_grad():
        want = probs(tx).numpy()
    err = float(np.abs(got - want).max())
    r["check"] = {"vs": "torch (torchvision's layout)", "max_abs_err": err, "tolerance": 1e-4,
                  "ok": err < 1e-4}

    def compiled() -> tuple[Callable[[], Any], dict]:
        with torch.no_grad():
            fn, first_s = inductor(probs, tx)
        return no_grad(lambda: fn(tx)), {"first_call_s": first_s}

    wanted, systems = set(args.peers), r["systems"]
    prepare(systems, calls, "torch eager", wanted, lambda: (no_grad(lambda: probs(tx)), {}))
    prepare(systems, calls, "torch inductor", wanted, compiled)
    rates(systems, calls, "images_s", MOBILENET_BATCH, args.rounds)
    return r


MODELS = {"smollm2": smollm2, "minilm": minilm, "mobilenet": mobilenet}


def ratios(r: dict, mine: str = "lumos") -> dict:
    """Per measure, system `mine`'s throughput over each peer's (latencies inverted)."""
    lumos, out = r["systems"][mine], {}
    for measure, (_, higher) in MEASURES.items():
        if measure not in lumos:
            continue
        out[measure] = {}
        for name, s in r["systems"].items():
            if name != mine and measure in s:
                a, b = lumos[measure], s[measure]
                out[measure][name] = a / b if higher else b / a
    return out


def show(name: str, value: float, measure: str) -> str:
    unit = MEASURES[measure][0]
    v = value * 1e3 if unit == "ms" else value
    return f"{name:24}{v:10.1f} {unit}"


def report(results: dict) -> None:
    print(f"{results['cpus']} CPUs (load average {results['load_average_1min']:.1f}), lumos "
          f"runtime {results['runtime']}, search {results['search']}, {results['rounds']} "
          f"rounds, DRAM read {results['read_gbps']:.1f} GB/s, OpenBLAS "
          f"{results['openblas_core']}")
    for model, r in results["models"].items():
        print(f"\n{model}: {r.get('what', '')}")
        if "error" in r:
            print(f"  error: {r['error']}")
            continue
        check = r["check"]
        err = check.get("max_rel_err", check.get("max_abs_err"))
        print(f"  lumos check vs {check['vs']}: {err:.2e} "
              f"({'ok' if check['ok'] else 'FAILED'}, tolerance {check['tolerance']:g}); "
              f"lumos compile {r['systems']['lumos']['compile_s']:.1f} s")
        for key, mine in (("ratios", "lumos"), ("ratios_high", "lumos high")):
            for measure, per_peer in r.get(key, {}).items():
                print(f"  {measure}" + (" (lumos at matmul_precision high: bf16x3 products; "
                                        f"check {r['check_high']['max_abs_err']:.2e})"
                                        if mine != "lumos" else ""))
                print("    " + show(mine, r["systems"][mine][measure], measure))
                for peer_name, ratio in per_peer.items():
                    print("    " + show(peer_name, r["systems"][peer_name][measure], measure) +
                          f"   {mine} {ratio:.2f}x")
        for peer_name, s in r["systems"].items():
            for why in ("skipped", "error"):
                if why in s:
                    print(f"  {peer_name}: {why}: {s[why]}")
        if "decode_bytes_per_token" in r:
            print(f"  decode reads {r['decode_bytes_per_token'] / 1e6:.1f} MB per token: "
                  f"{r['decode_fraction_of_read_bandwidth']:.1%} of the DRAM read bandwidth")


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    ap.add_argument("--runtime", choices=("cpu", "reference"), default="cpu")
    ap.add_argument("--search", type=int, default=2, metavar="N",
                    help="lumos: time N candidates per dim bucket (default 2: the CPU "
                         "runtime's seed programs, as `lumos run`; 0: no search)")
    ap.add_argument("--rounds", type=int, default=3, help="timed runs per measure (median)")
    ap.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    ap.add_argument("--gguf", help="smollm2: another GGUF file of the model (e.g. one "
                    "`lumos quantize` wrote); default the package's Q4_1 file")
    ap.add_argument("--context", type=int, default=256, help="smollm2: KV cache length")
    ap.add_argument("--prompt", type=int, default=PROMPT, metavar="N",
                    help="smollm2: the tokens in the context before decode is timed (default "
                    f"{PROMPT}; 1000 or 4000 with --context 4096: decode at a filled context)")
    ap.add_argument("--saturation-limit", type=float, metavar="S",
                    help="smollm2: the e-graph's time limit (CompileOptions' default if "
                         "not given)")
    args = ap.parse_args()
    keep_freed_memory()
    read_bps, threads = read_bandwidth(5)  # first: no runtime's worker threads yet
    import torch
    import torch._inductor.config
    import transformers

    torch._inductor.config.freezing = True
    transformers.logging.set_verbosity_error()  # unused-weight notices of the peer models
    results: dict = {
        "benchmark": "models", "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
        "openblas_core": openblas_core(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "lumos_threads": os.environ.get("LUMOS_NUM_THREADS", "default"),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
        "inductor_freezing": True, "runtime": args.runtime, "search": args.search,
        "rounds": args.rounds, "read_gbps": read_bps / 1e9, "gguf": args.gguf,
        "context": args.context,
        "read_yardstick": f"numpy max over a 256 MiB f32 array, {threads} thread(s)",
        "models": {},
    }
    for name in args.models:
        t0 = time.perf_counter()
        try:
            r = MODELS[name](args, read_bps)
            r["ratios"] = ratios(r)
            if "lumos high" in r["systems"]:
                r["ratios_high"] = {m: {p: x for p, x in v.items() if p != "lumos"}
                                    for m, v in ratios(r, "lumos high").items()}
        except Exception as e:  # record, and go on with the next model
            r = {"error": error_text(e)}
        r["wall_s"] = time.perf_counter() - t0
        results["models"][name] = r
        print(f"[{name} done in {r['wall_s']:.0f} s]", flush=True)
    report(results)
    out = Path(__file__).resolve().parent / "results" / "models.json"
    out.parent.mkdir(exist_ok=True)  # (not in a fresh clone)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
