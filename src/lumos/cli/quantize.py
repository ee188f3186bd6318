"""`lumos quantize IN.gguf OUT.gguf --type Q4_K_M`: a GGUF file's matrices re-encoded."""

from __future__ import annotations

import argparse

from lumos.cli.common import say


def add_parser(sub: argparse._SubParsersAction) -> None:
    from lumos.io.quantize import FILE_TYPES

    q = sub.add_parser("quantize", help="re-encode a GGUF file's matrices: lumos quantize "
                                        "IN.gguf OUT.gguf --type Q4_K_M")
    q.add_argument("input")
    q.add_argument("output")
    q.add_argument("--type", default="Q4_K_M", choices=list(FILE_TYPES),
                   help="the file type (default Q4_K_M)")


def cmd_quantize(args: argparse.Namespace) -> int:
    from lumos.io.quantize import requantize

    def progress(i: int, n: int, name: str, kind: str) -> None:
        if i == n or i % 20 == 0:
            say(f"{i}/{n} tensors ({name}: {kind})")

    counts = requantize(args.input, args.output, args.type, progress)
    say(f"wrote {args.output}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 0
