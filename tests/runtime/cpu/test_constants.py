"""The renderer decides nothing the search could (issue 42): every numeric constant of
codegen and the kernel decoder is named here with what it is. A new size threshold that
selects code fails this test until it is a schedule field (lower_cpu.egg's schedules) or
a seed's weight, which only ranks the search's first generation. The debt is listed, so
that it can only shrink."""

from __future__ import annotations

import lumos.runtime.cpu.codegen as codegen
import lumos.runtime.cpu.kernels as kernels

# lowering's schedule (also that of kernels that carry none: products, copies, gathers)
SCHEDULE_DEFAULTS = {"codegen": {"PAR_SEED", "AHEAD_SEED", "INNER_LAST"},  # (from kernels)
                     "kernels": {"PAR_SEED", "WIDE_LOWERED", "AHEAD_SEED", "INNER_LAST"}}
# rules of thumb of the seeds (kernels.seeds): they rank generation 0 and nothing else
SEED_WEIGHTS = {"kernels": {"AMX_MIN_MACS", "DUPLICATE_OPS", "OWN_MAX_B_BYTES",
                            "OWN_MIN_COLUMNS", "PACK_MIN_BYTES", "PACK_RELU_MIN_BYTES",
                            "PANELS_MAX_K", "ROWS_MAX_M", "TILE_MAX_B_BYTES",
                            "TILE_MIN_BYTES", "WIDE_LANES", "WIDE_MIN_ROW",
                            "WINDOWS_MIN_COLUMNS", "WINOGRAD_MIN_CHANNELS",
                            "WINOGRAD_MIN_TILES", "WINOGRAD_PHASED_TILES"}}
# formats and budgets that select no code: a static buffer's header, kernel calls per
# driver function, loop-invariant conditions a loop is copied for (its code size), the
# fusion rules' rounds
FORMATS = {"codegen": {"STATIC_HEADER", "DRIVER_PART", "UNSWITCH"}, "kernels": {"FUSE_ROUNDS"}}
# choices still made in the renderer or the decoder's legality, each to become a schedule
# field (blocks, tiles, bands, packs, prefetch, how a reduction accumulates) or a rule
# (ROWS_MAX_M: also templated into the fixed C of lumos_gemm_own)
DEBT = {"codegen": {"BAND_FLOATS", "BLOCK", "MAX_LANES", "MAX_UNROLL", "OUTER_BLOCK",
                    "PACK_FLOATS", "PACK_MIN_WIDTH", "PREFETCH_LINES",
                    "PREFETCH_MIN_ROW", "REDUCE_BLOCK", "REDUCE_BLOCK_MIN_LENGTH",
                    "ROWS_MAX_M", "SHORT_REDUCE", "TILES", "TILE_FLOATS"},
        "kernels": {"SHORT_AXIS"}}


def constants(module: object) -> set[str]:
    return {n for n, v in vars(module).items()
            if n.isupper() and isinstance(v, int | float) and not isinstance(v, bool)}


def test_every_constant_of_the_renderer_is_a_default_a_weight_or_known_debt() -> None:
    for name, module in (("codegen", codegen), ("kernels", kernels)):
        known = set().union(*(d.get(name, set()) for d in (SCHEDULE_DEFAULTS, SEED_WEIGHTS,
                                                           FORMATS, DEBT)))
        assert constants(module) <= known, \
            f"{name}: new constants {sorted(constants(module) - known)}: make each a " \
            "schedule field (an e-graph alternative) or a seed's weight"
        # (and the debt only shrinks: a constant gone is struck from the list)
        assert known <= constants(module), sorted(known - constants(module))
