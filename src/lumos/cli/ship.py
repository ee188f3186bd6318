"""`lumos compile MODEL -o FILE`: search once, then write the chosen programs with their
compiled kernels to one artifact file that `lumos run FILE` (or
`CpuRuntime(artifacts=FILE)`) loads on a machine of the same runtime signature."""

from __future__ import annotations

import argparse

from lumos.cli.common import make_runtime, say
from lumos.cli.llm import SHIPPED, batcher, generator, load_llm
from lumos.errors import LumosError


def cmd_compile(args: argparse.Namespace) -> int:
    if args.runtime != "cpu":
        raise LumosError("lumos compile writes CPU programs: use --runtime cpu")
    if args.slots < 0:
        raise LumosError(f"--slots must be >= 0, got {args.slots}")
    pre = load_llm(args.model, args.context, max(args.slots, 1))
    rt = make_runtime("cpu")
    if args.slots:
        batcher(args, pre, runtime=rt)
        meta = {"command": "serve", "slots": args.slots,
                **{k: getattr(args, k) for k in SHIPPED}}
    else:
        generator(args, pre, runtime=rt)
        meta = {"command": "run", **{k: getattr(args, k) for k in SHIPPED}}
    rt.ship(args.output, meta)
    say(f"wrote {args.output}: " + (f"serve it with `lumos serve {args.output}`" if args.slots
                                     else f"run it with `lumos run {args.output} PROMPT`"))
    return 0
