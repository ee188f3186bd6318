"""`lumos serve MODEL`: the OpenAI-compatible HTTP server (`lumos.serve`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lumos.cli.common import say
from lumos.cli.llm import LLMS, add_llm_options, batcher, load_llm, shipped
from lumos.errors import LumosError


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve", help="an OpenAI-compatible HTTP server: lumos serve smollm2")
    s.add_argument("model", help=f"one of {sorted(LLMS)}, a .gguf file or HF folder, or an "
                   "artifact file from `lumos compile`")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default "
                   "127.0.0.1; 0.0.0.0 for every interface)")
    s.add_argument("--port", type=int, default=8000, help="0: a free port (default 8000)")
    s.add_argument("--name", help="the model's id in the API (default: the model argument's "
                   "name)")
    s.add_argument("--slots", type=int, default=8,
                   help="requests decoded at once (each a row of the KV cache; later ones "
                   "wait; default 8)")
    add_llm_options(s)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from lumos import serve
    except ModuleNotFoundError as e:
        raise LumosError(f"`lumos serve` needs {e.name}: pip install 'lumos[serve]'") from None
    name = args.name or (args.model if args.model in LLMS else Path(args.model).stem)
    artifacts = shipped(args, "serve")
    if args.slots < 1:
        raise LumosError(f"--slots must be >= 1, got {args.slots}")
    pre = load_llm(args.model, args.context, args.slots)
    batch = batcher(args, pre, artifacts)
    tok, cfg = pre.tokenizer, pre.model.config
    token = lambda i: tok.id_to_token(i) if i is not None else ""  # noqa: E731
    engine = serve.Engine(name, batch, tok, pre.chat_template, token(cfg.bos_token_id) or "",
                          token(cfg.eos_token_id) or "",
                          frozenset({cfg.eos_token_id} - {None}))
    serve.serve(engine, args.host, args.port,
                lambda url: say(f"serving {name!r} at {url}/v1 (Ctrl-C stops)"))
    return 0
