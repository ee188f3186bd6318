"""The `lumos` command. Each subcommand lives in a module of this package; the CLI imports
the models, never the reverse.

    lumos run smollm2 "Once upon a time" --max-tokens 64
    lumos bench smollm2
    lumos embed minilm "a sentence" "another"
    lumos compile smollm2 -o smollm2.lar        # then: lumos run smollm2.lar "Hello"
    lumos serve smollm2 --port 8000             # the OpenAI HTTP API
    lumos viz graph.py -o graph.html
    lumos info
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from lumos.cli.llm import LLMS, add_llm_options
from lumos.errors import LumosError

# command -> model name -> (module of lumos.models it needs, function of lumos.cli.models)
DISPATCH = {"embed": {"minilm": ("bert", "embed")},
            "classify": {"mobilenet": ("mobilenet", "classify")},
            "transcribe": {"whisper": ("whisper", "transcribe")}}
BENCH = {"minilm": ("bert", "bench_minilm"), "mobilenet": ("mobilenet", "bench_mobilenet"),
         "whisper": ("whisper", "bench_whisper")}


def _dispatch(target: tuple[str, str], rest: Sequence[str]) -> int:
    module, fn = target
    try:
        importlib.import_module(f"lumos.models.{module}")
    except ModuleNotFoundError as e:
        if e.name != f"lumos.models.{module}":
            raise
        raise LumosError(f"lumos.models.{module} is not available in this installation") \
            from None
    from lumos.cli import models

    return int(getattr(models, fn)(list(rest)) or 0)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lumos", description="lumos: compile and run models.")
    sub = p.add_subparsers(dest="command", required=True)
    known = f"one of {sorted(LLMS)}, a .gguf file or HF folder"
    r = sub.add_parser("run", help="generate text: lumos run smollm2 PROMPT")
    r.add_argument("model", help=f"{known}, or an artifact file from `lumos compile`")
    r.add_argument("prompt")
    r.add_argument("--max-tokens", type=int, default=128)
    r.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    r.add_argument("--top-k", type=int, default=0)
    r.add_argument("--top-p", type=float, default=1.0)
    r.add_argument("--repetition-penalty", type=float, default=1.0)
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    add_llm_options(r)
    b = sub.add_parser("bench", help="prefill latency, decode tok/s, memory bandwidth")
    b.add_argument("model", help=f"one of {sorted({*LLMS, *BENCH})}, a .gguf file or HF "
                   "folder, or an artifact file (other options go to that model's bench)")
    b.add_argument("--prompt-tokens", type=int, default=16)
    b.add_argument("--prefill-tokens", type=int, default=128)
    b.add_argument("--decode-tokens", type=int, default=32)
    b.add_argument("--rounds", type=int, default=3)
    add_llm_options(b)
    for cmd, models in DISPATCH.items():
        d = sub.add_parser(cmd, help=f"lumos {cmd} {'|'.join(models)} ...", add_help=False)
        d.add_argument("model")
        d.add_argument("rest", nargs=argparse.REMAINDER)
    c = sub.add_parser("compile", help="search once, write an artifact to ship: "
                                       "lumos compile smollm2 -o smollm2.lar")
    c.add_argument("model", help=known)
    c.add_argument("-o", "--output", required=True, help="the artifact file to write")
    c.add_argument("--slots", type=int, default=0, help="an artifact for `lumos serve`, "
                   "decoding this many requests at once (default 0: for `lumos run`)")
    add_llm_options(c)
    from lumos.cli import info, quantize, serve, viz

    serve.add_parser(sub)
    quantize.add_parser(sub)
    viz.add_parser(sub)
    info.add_parser(sub)
    return p


def _command(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    from lumos.cli import info, llm, quantize, serve, ship, viz

    return {"run": llm.cmd_run, "bench": llm.cmd_bench, "compile": ship.cmd_compile,
            "serve": serve.cmd_serve, "quantize": quantize.cmd_quantize,
            "viz": viz.cmd_viz, "info": info.cmd_info}[args.command]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv[:2] if argv[:1] == ["bench"] and argv[1:2] and
                                argv[1] in BENCH else argv)
    try:
        if args.command == "bench" and args.model in BENCH:  # its options are its own
            return _dispatch(BENCH[args.model], argv[2:])
        if args.command in DISPATCH:
            models = DISPATCH[args.command]
            if args.model not in models:
                raise LumosError(f"unknown model {args.model!r} for {args.command} "
                                 f"(known: {', '.join(models)})")
            return _dispatch(models[args.model], args.rest)
        return _command(args)(args)
    except LumosError as e:
        print(f"lumos: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
