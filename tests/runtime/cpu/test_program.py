"""CpuRuntime programs: symbolic dims, buffers (inputs by pointer, persisted and reused
outputs, the arena plan), the compile cache and compile errors."""

from __future__ import annotations

import ctypes
import dataclasses
import re
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lumos
from lumos.runtime.cpu import CompileError, CpuRuntime, build
from lumos.runtime.cpu import cc as cc_module
from lumos.runtime.cpu import codegen as codegen_module
from lumos.runtime.cpu import program as program_module
from lumos.runtime.cpu.plan import ALIGN, plan
from tests.runtime.cpu.common import BASELINE, assert_same, execute_both, run_both


def test_symbolic_dims_one_compile_many_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = program_module.compile_units
    monkeypatch.setattr(program_module, "compile_units",
                        lambda src: calls.append(1) or real(src))
    g = lumos.Graph()
    n, m = g.dim("n", 1, 10000), g.dim("m", 1)
    x = g.tensor((n, m), lumos.f32, "x")
    v = g.tensor((m,), lumos.f32, "v")
    outs = [
        (x.T.pad((1, 2)) * 3).sum(0),  # permuted, padded, reduced over the symbolic axis
        x.narrow(0, 1, n - 1).reshape(-1) + 1,  # a slice, flattened
        (x + v).softmax(1),  # broadcast
        lumos.cat([x, x.flip(0)], 0).amax(1),
        x.reshape(-1).repeat(2)[::3],
    ]
    for o in outs:
        o.output()
    prog = g.compile(CpuRuntime(), BASELINE)
    rng = np.random.default_rng(0)
    for sn, sm in [(1, 1), (3, 5), (17, 2), (300, 257), (4, 5000)]:
        feeds = {x: rng.standard_normal((sn, sm)).astype(np.float32),
                 v: rng.standard_normal(sm).astype(np.float32)}
        for o, (got, want) in zip(outs, execute_both(prog, outs, feeds), strict=True):
            assert_same(got, want, o.dtype, exact=False, what=f"n={sn} m={sm}")
    assert len(calls) == 1


def test_inputs_are_read_in_place_and_results_reused() -> None:
    g = lumos.Graph()
    x = g.tensor((1000,), lumos.f32, "x")
    y = (x * 2).output()
    prog = g.compile(CpuRuntime(), BASELINE)
    a = np.arange(1000, dtype=np.float32)
    prog.set_data(x, a)
    prog.execute()
    held = prog.get(y)
    np.testing.assert_array_equal(held, a * 2)
    a[:] = 1  # bound by pointer: the next execute sees the new values
    prog.execute()
    np.testing.assert_array_equal(held, np.arange(1000) * 2)  # a held result is kept
    second = prog.get(y)
    np.testing.assert_array_equal(second, 2)
    address = second.ctypes.data
    del second, held
    prog.execute()  # nobody holds the last result: its buffer is reused
    assert prog.get(y).ctypes.data == address


def test_persisted_outputs_fed_back_alternate_between_two_buffers() -> None:
    """A persisted output keeps its buffer; fed back as an input (a KV cache), the run
    writes the other of two buffers, which becomes the result (no copy of the state)."""
    g = lumos.Graph()
    cache = g.tensor((6,), lumos.f32, "cache")
    new = (cache.flip(0) + 1).output(persist=True)  # reads the buffer it overwrites
    prog = g.compile(CpuRuntime(), BASELINE)
    state = np.zeros(6, np.float32)
    state[0] = 5
    prog.set_data(cache, state)
    prog.execute()
    out = prog.get(new)
    want = state[::-1] + 1
    np.testing.assert_array_equal(out, want)
    prog.execute()  # not fed back: written in place
    assert prog.get(new) is out
    seen = set()
    for _ in range(4):
        fed = prog.get(new)
        prog.set_data(cache, fed)  # the output buffer is now also the input
        prog.execute()
        want = want[::-1] + 1
        assert prog.get(new) is not fed
        seen.add(id(prog.get(new)))
        np.testing.assert_array_equal(prog.get(new), want)
    assert len(seen) == 2


def _cache_graph(reader: bool) -> tuple:
    """A (4, 3) cache with row `pos` set to `row` (a Scatter), persisted; with `reader`
    also an output that reads the old cache after the write."""
    g = lumos.Graph()
    cache = g.tensor((4, 3), lumos.f32, "cache")
    pos = g.tensor((1, 3), lumos.i64, "pos")
    row = g.tensor((1, 3), lumos.f32, "row")
    new = cache.scatter(0, pos, row)
    outs = [new.output(persist=True), *([(new + cache).output()] if reader else [])]
    return g.compile(CpuRuntime(), BASELINE), cache, pos, row, outs


@pytest.mark.parametrize("case", ["inplace", "later_reader", "bound_twice"])
def test_scatter_into_a_fed_back_input_writes_in_place(case: str) -> None:
    """A persisted output made by a Scatter into an input, fed back as that input (a KV
    cache), is updated in the input's memory; not when the old cache is read after the
    write (the layout sees it) or when its memory is bound to another input too."""
    prog, cache, pos, row, outs = _cache_graph(case == "later_reader")
    assert prog.compiled.layout.inplace == (() if case == "later_reader" else ((0, 0),))
    want = np.arange(12, dtype=np.float32).reshape(4, 3)
    prog.set_data(cache, want.copy())
    prog.set_data(row, np.zeros((1, 3), np.float32))
    prog.set_data(pos, np.zeros((1, 3), np.int64))
    prog.execute()  # (not fed back yet)
    want[0] = 0
    addresses = set()
    for step in range(1, 5):
        got = prog.get(outs[0])
        prog.set_data(cache, got)
        values = got[1:2] if case == "bound_twice" else np.full((1, 3), step, np.float32)
        prog.set_data(row, values)
        prog.set_data(pos, np.full((1, 3), step % 4, np.int64))
        old, want = want, want.copy()
        want[step % 4] = values[0]
        prog.execute()
        np.testing.assert_array_equal(prog.get(outs[0]), want)
        if case == "later_reader":
            np.testing.assert_array_equal(prog.get(outs[1]), want + old)
        addresses.add(prog.get(outs[0]).ctypes.data)
    assert len(addresses) == (1 if case == "inplace" else 2)


def test_outputs_of_inputs_constants_and_shared_nodes() -> None:
    g = lumos.Graph()
    x = g.tensor((2, 3), lumos.i32, "x")
    s = x.sum()
    outs = [x, x.T, s, s.reshape(1), lumos.zeros_like(x) + 7, x + 0]
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    for o, (got, want) in zip(outs, run_both(outs, {x: data}), strict=True):
        assert_same(got, want, o.dtype)
    assert outs[2].ndim == 0


def test_memory_log_reports_reused_arena(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("LUMOS_LOG", "memory")
    g = lumos.Graph()
    x = g.tensor((1024,), lumos.f32, "x")
    y = x
    for k in range(8):
        y = y * 1.5 + k if k % 2 else y * y
    y.output()
    (got, want), = run_both([y], {x: np.linspace(-1, 1, 1024, dtype=np.float32)})
    assert_same(got, want, lumos.f32)
    line = [ln for ln in capsys.readouterr().err.splitlines() if "peak intermediates" in ln]
    peak, total = map(int, re.search(r"(\d+) bytes for .* (\d+) bytes without", line[0]).groups())
    assert peak == 2 * 4096 < total  # a chain needs two live buffers


def test_arena_plans_serve_smaller_sizes(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    """A plan is made at the dims rounded up to powers of two and reused below them (a
    decode loop does not plan per token), except where a buffer shrinks as a dim grows
    (a slice from n on): then sizes are planned exactly. Results stay right in any order."""
    monkeypatch.setenv("LUMOS_LOG", "memory")
    rng = np.random.default_rng(0)
    for shrinking, want in ((False, ["8", "4", "64"]), (True, ["8", "5", "7", "6", "3", "64"])):
        g = lumos.Graph()
        n = g.dim("n", 1, 64)
        x = g.tensor((n, 16), lumos.f32, "x")
        w = g.tensor((64, 16), lumos.f32, "w")
        outs = [((x * 2).exp() + 1).sum(1).output()]  # intermediates of n x 16
        if shrinking:  # and of (64 - n) x 16
            outs.append(((w.narrow(0, 0, 64 - n) * 3).exp() + 1).sum(1).output())
        prog = g.compile(CpuRuntime(), BASELINE)
        for sn in (8, 5, 7, 6, 3, 64, 33, 60):
            feeds = {x: rng.standard_normal((sn, 16)).astype(np.float32),
                     w: rng.standard_normal((64, 16)).astype(np.float32)}
            for o, (got, ref) in zip(outs, execute_both(prog, outs, feeds), strict=True):
                assert_same(got, ref, o.dtype, exact=False, what=f"n={sn}")
        planned = re.findall(r"peak intermediates \d+ bytes for dims \{'n': (\d+)\}",
                             capsys.readouterr().err)
        assert planned[:len(want)] == want


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 12), st.integers(0, 6)),
                max_size=30))
def test_plan_never_overlaps_live_buffers(bufs: list[tuple[int, int, int]]) -> None:
    sizes = [s for s, _, _ in bufs]
    lives = [(f, f + d) for _, f, d in bufs]
    offsets, total = plan(sizes, lives)
    for a in range(len(bufs)):
        assert offsets[a] % ALIGN == 0 and offsets[a] + sizes[a] <= total
        for b in range(a):
            if lives[a][0] <= lives[b][1] and lives[b][0] <= lives[a][1]:
                assert (offsets[a] + sizes[a] <= offsets[b] or offsets[b] + sizes[b] <= offsets[a]
                        or 0 in (sizes[a], sizes[b]))
    assert total <= sum(-(-s // ALIGN) * ALIGN for s in sizes)


def test_compile_cache_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    g = lumos.Graph()
    x = g.tensor((5,), lumos.f32, "x")
    (x.exp() * 3).output()
    first = build(g)
    assert first.library.exists() and first.source.exists()
    monkeypatch.setattr(cc_module.subprocess, "run", lambda *a, **k: pytest.fail("recompiled"))
    assert build(g).library == first.library


@pytest.mark.parametrize("part", [64, 1])
def test_a_run_with_a_budget_stops_between_kernels(part: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A search's timing run of a candidate that has lost stops after the kernel that
    passes its budget; a run without one (after it, too) computes everything. The same
    with the driver's calls in parts of one call each (codegen.DRIVER_PART): the stop
    crosses from a part to the driver."""
    monkeypatch.setattr(codegen_module, "DRIVER_PART", part)
    g = lumos.Graph()
    x = g.tensor((64, 64), lumos.f32, "x")
    outs = [(x * (k + 2)).exp().sum(1).output() for k in range(4)]  # a kernel each, at least
    prog = build(g)
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    want = [np.exp(a.astype(np.float64) * (k + 2)).sum(1) for k in range(len(outs))]

    def run(budget: float | None) -> list[np.ndarray]:
        got = [np.full(64, np.nan, np.float32) for _ in outs]
        prog.run([a], {}, got, budget=budget)
        return got
    assert sum(np.isnan(o).all() for o in run(1e-9)) >= len(outs) - 1  # one kernel ran
    for budget in (None, 60.0, None):
        for o, w in zip(run(budget), want, strict=True):
            np.testing.assert_allclose(o, w, rtol=1e-4)


def test_a_run_cut_short_reports_the_kernels_it_reached() -> None:
    """tune.timed of a profiled program past its bound: the warm-up's time, and each
    kernel's seconds in it, 0 for those it did not reach (a full run before it does not
    leave its times behind); within the bound, every kernel's time."""
    from lumos.runtime.cpu.tune import timed
    g = lumos.Graph()
    x = g.tensor((64, 64), lumos.f32, "x")
    for k in range(4):
        (x * (k + 2)).exp().sum(1).output()
    prog = build(g, profile=True)
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    seconds, kernels = timed(prog, [a], {}, 2)
    assert len(kernels) == len(prog.layout.profiled) >= 4 and all(t > 0 for t in kernels)
    seconds, kernels = timed(prog, [a], {}, 2, bound=1e-9)
    assert seconds > 1e-9 and len(kernels) == len(prog.layout.profiled)
    assert kernels[0] > 0 and not any(kernels[1:])


def test_a_kernel_compiles_once_with_or_without_blas_beside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Objects are cached per unit: a kernel unit is the same object in a program whose
    other units call OpenBLAS (the search's BLAS seed) and in one whose units do not."""
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path))
    compiled: list[str] = []
    real = cc_module.subprocess.Popen
    monkeypatch.setattr(cc_module.subprocess, "Popen", lambda cmd, **kw: (
        compiled.append(cmd[-1]) if "-c" in cmd else None) or real(cmd, **kw))
    kernel = "int k_shared(int x) { return x + 1; }\n"
    blas = "#include <cblas.h>\nint k_blas(void) { return (int)sizeof(blasint); }\n"
    cc_module.compile_units([kernel, blas])
    cc_module.compile_units(["int k_other(void) { return 2; }\n", kernel])
    assert len(compiled) == 3 and len(set(compiled)) == 3


def test_kernels_compile_in_batches_cached_per_kernel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(prelude, definition) units compile in batches (two per job), each kernel found
    again by its own key; batches that overlap (processes compiling at once) still link,
    the definitions being weak."""
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path))
    monkeypatch.setenv("LUMOS_CC_JOBS", "1")
    compiled: list[str] = []
    real = cc_module.subprocess.Popen
    monkeypatch.setattr(cc_module.subprocess, "Popen", lambda cmd, **kw: (
        compiled.append(Path(cmd[-1]).read_text()) if "-c" in cmd else None) or real(cmd, **kw))

    def kernel(k: int) -> tuple[str, str]:
        return "#include <stdint.h>\n", \
            f"__attribute__((weak)) int64_t k{k}(void) {{ return {k}; }}\n"
    driver = "#include <stdint.h>\nint64_t k0(void), k1(void), k2(void), k3(void);\n" \
        "int64_t run(void) { return k0() * 1000 + k1() * 100 + k2() * 10 + k3(); }\n"
    cc_module.compile_units([driver, kernel(0), kernel(1), kernel(2)])
    assert sorted(c.count(") {") for c in compiled) == [1, 1, 2]  # driver, 2 batches
    compiled.clear()
    # the batch of k0 and k2 loses k2's reference, as if another process had compiled k2
    # elsewhere at the same time: k2 is compiled again, and both batches are linked
    pair = next(u for u in (tmp_path / "cpu").glob("*.unit.c") if u.read_text().count(") {") == 2)
    refs = [r for r in (tmp_path / "cpu").glob("*.ref") if r.read_text() == f"{pair.stem[:-5]}.o"]
    assert len(refs) == 2
    refs[0].unlink()
    lib = cc_module.compile_units([driver, kernel(3), kernel(2), kernel(1), kernel(0)])
    assert len(compiled) == 2 and all(c.count(") {") == 1 for c in compiled)
    run = ctypes.CDLL(str(lib)).run
    run.restype = ctypes.c_int64
    assert run() == 123


def test_a_large_program_compiles_in_batches_of_bounded_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `BATCH_BYTES` of definitions a batch is split further: a compiler process's
    time grows with its text, and each one must end within the candidate's timeout."""
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path))
    monkeypatch.setenv("LUMOS_CC_JOBS", "1")
    monkeypatch.setattr(cc_module, "BATCH_BYTES", 200)
    compiled: list[str] = []
    real = cc_module.subprocess.Popen
    monkeypatch.setattr(cc_module.subprocess, "Popen", lambda cmd, **kw: (
        compiled.append(Path(cmd[-1]).read_text()) if "-c" in cmd else None) or real(cmd, **kw))
    defs = [("#include <stdint.h>\n",
             f"__attribute__((weak)) int64_t k{k}(void) {{ return {k}; }} /*{'x' * 40}*/\n")
            for k in range(8)]  # 8 x ~90 bytes: 4 batches of 200 bytes, not 2
    driver = "#include <stdint.h>\nint64_t k0(void), k7(void);\n" \
        "int64_t run(void) { return k0() * 10 + k7(); }\n"
    run = ctypes.CDLL(str(cc_module.compile_units([driver, *defs]))).run
    run.restype = ctypes.c_int64
    assert run() == 7
    assert sorted(c.count(") {") for c in compiled) == [1, 2, 2, 2, 2]  # driver, 4 batches


def test_a_slow_unit_holds_one_job_not_the_queue(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With two jobs, the units after a slow one (OWN_GEMM's: 0.4 s) compile in the other
    job while it runs: each waits for the first compiler to end, not the first started."""
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path))
    monkeypatch.setenv("LUMOS_CC_JOBS", "2")
    starts: list[float] = []
    real = cc_module.subprocess.Popen

    def popen(cmd: list[str], **kw: object) -> object:
        if "-c" not in cmd:
            return real(cmd, **kw)
        starts.append(time.time())
        if "k_slow" in Path(cmd[-1]).read_text():  # 2 s before its compiler starts
            cmd = ["sh", "-c", 'sleep 2 && exec "$@"', "sh", *cmd]
        return real(cmd, **kw)

    monkeypatch.setattr(cc_module.subprocess, "Popen", popen)
    units = [f"int k_{name}(void) {{ return {k}; }}\n"
             for k, name in enumerate(["slow", "a", "b", "c", "d"])]
    cc_module.compile_units(units)
    slow = next(o for o in (tmp_path / "cpu").glob("*.o") if b"k_slow" in o.read_bytes())
    assert len(starts) == 5 and max(starts[1:]) < slow.stat().st_mtime  # (written at its end)

@pytest.mark.parametrize("unit", ["OWN_GEMM", "AMX_GEMM"])
def test_a_kernel_reused_from_a_batch_loads_without_its_batchmates_units(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unit: str) -> None:
    """Kernels compile in batches, one object each, and a later program reuses a kernel
    from such a batch: another kernel of that batch calling lumos' own or AMX product
    (units the later program does not link) must not keep the later one from loading
    (a high-precision compile's kernels, then a float program's, in one cache)."""
    from lumos.runtime.cpu import codegen

    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path))
    monkeypatch.setenv("LUMOS_CC_JOBS", "1")  # two batches: units 0 and 2, then unit 1
    head = codegen.BLAS + codegen.PRELUDE
    call = "lumos_sgemm_own" if unit == "OWN_GEMM" else "lumos_sgemm_amx"
    calls = (head, f"void k_calls(const float *a, float *c) {{ {call}(0, 0, 1, 1, 1, a, 1, "
                   "a, 1, c, 1); }\n")
    plain = (head, "int k_plain(void) { return 1; }\n")
    cc_module.load(cc_module.compile_units(
        [calls, (head, "int k_other(void) { return 2; }\n"), plain,
         head + getattr(codegen, unit)]))
    later = cc_module.load(cc_module.compile_units([plain, (head, "int k_more(void) "
                                                                  "{ return 3; }\n")]))
    assert later.k_plain() == 1


def test_compile_error_names_the_source() -> None:
    with pytest.raises(CompileError, match=r"generated source .*\.c") as info:
        cc_module.compile_source("this is not C;\n")
    path = re.search(r"source (\S+\.c)", str(info.value)).group(1)
    assert open(path).read() == "this is not C;\n"


def test_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LUMOS_NUM_THREADS", "1")
    g = lumos.Graph()
    x = g.tensor((300, 300), lumos.f32, "x")
    y = x.T.sum(1)
    (got, want), = run_both([y], {x: np.ones((300, 300), np.float32)})
    assert_same(got, want, lumos.f32)


def test_flush_denormals_holds_only_while_the_program_runs() -> None:
    """CompileOptions.flush_denormals: a subnormal result, and a subnormal operand, are
    zero inside the run (a subnormal half is a normal float, and stays exact); after it,
    the calling thread and the pool's threads keep subnormals again (numpy's arithmetic,
    and the same graph compiled without the option: the reference's values bit for bit,
    on both threads)."""
    n = 1 << 16  # elementwise kernels split over the threads from 32768 elements
    g = lumos.Graph()
    x = g.tensor((n,), lumos.f32, "x")
    d = g.tensor((n,), lumos.f32, "d")
    h = g.tensor((n,), lumos.f16, "h")  # subnormal halves: normal floats, never flushed
    outs = [(x * x).output(), (d + d).output(), (h.to(lumos.f32) * 2.0).output()]
    feeds = {x: np.full(n, 2.0 ** -70, np.float32), d: np.full(n, 2.0 ** -140, np.float32),
             h: np.full(n, 2.0 ** -24, np.float16)}
    tiny = lumos.CompileOptions(limit=1, cache=False)
    flushed = g.compile(CpuRuntime(), dataclasses.replace(tiny, flush_denormals=True))
    for t, want in zip(outs, (0.0, 0.0, 2.0 ** -23), strict=True):
        np.testing.assert_array_equal(execute_both(flushed, [t], feeds)[0][0], want)
    assert np.float32(2.0 ** -70) * np.float32(2.0 ** -70) == np.float32(2.0 ** -140) > 0
    kept = g.compile(CpuRuntime(), tiny)
    for k, (got, want) in enumerate(execute_both(kept, outs, feeds)):
        assert (want > 0).all()
        assert_same(got, want, lumos.f32, exact=True, what=f"output {k}")


def test_a_reduction_over_rows_of_its_own_prefetches_the_rows_ahead() -> None:
    """codegen.prefetch_rows: a reduction whose every output reads its own row of 32 bytes
    or more prefetches the row AHEAD_SEED bytes ahead (rows of 64 floats: 4 rows, 256
    elements, 5 lines as the row may start mid-line); not rows of 24 bytes (a max of
    int8s), nor a column sum (the rows are read across). The results the same."""
    def sum_or_max(x: lumos.Tensor, axis: int) -> lumos.Tensor:
        return x.amax(axis) if x.dtype is lumos.i8 else x.sum(axis)  # i8 sums are i64

    cases = (((96, 64), lumos.f32, 1, ["b0 + (64*z0) + " + str(256 + 16 * k) for k in range(5)]),
             ((96, 24), lumos.i8, 1, []),
             ((64, 96), lumos.f32, 0, []))
    for shape, dt, axis, want_lines in cases:
        g = lumos.Graph()
        x = g.tensor(shape, dt, "x")
        y = sum_or_max(x, axis).output()
        a = np.random.default_rng(0).integers(-9, 9, shape).astype(dt.np)
        (got, want), = run_both([y], {x: a})
        assert_same(got, want, y.dtype, exact=False, what=f"{shape} sum({axis})")
        text = build(g).source.read_text()
        found = re.findall(r"__builtin_prefetch\((b\d.*?)\);", text)
        assert found == want_lines, (shape, axis)


def test_rows_of_a_multiple_of_16_or_long_are_vectorized_wide() -> None:
    """codegen.LUMOS_WIDE on a kernel whose output rows hold a multiple of 16 elements or at
    least 256 (64-byte vectors), not on one of 28 (most of each row in scalar code); the
    results the same either way."""
    for cols, wide in ((96, True), (300, True), (28, False), (24, False)):
        g = lumos.Graph()
        x = g.tensor((64, cols), lumos.f32, "x")
        y = (x * 3.0 + 1.0).exp().output()
        feeds = {x: np.random.default_rng(cols).standard_normal((64, cols)).astype(np.float32)}
        (got, want), = run_both([y], feeds)
        assert_same(got, want, lumos.f32, exact=False, what=f"{cols} columns")
        text = build(g).source.read_text()
        assert ("LUMOS_WIDE void" in text) == wide, cols


def test_reductions_along_a_long_axis_are_vectorized_wide() -> None:
    """... and on a reduction whose reduced axis (its vector loop) holds a multiple of 16,
    at least 256, or up to 256 or more (a symbolic length: MiniLM's softmax sums over its
    sequence, 2.8 -> 1.9 ms a layer), whatever its output's rows; not a reduction of 20
    into rows of 28."""
    for length, wide in ((300, True), (32, True), (20, False), ("n", True)):
        g = lumos.Graph()
        n = g.dim("n", 1, 512) if length == "n" else length
        x = g.tensor((28, n), lumos.f32, "x")
        y = x.exp().sum(1).output()
        size = 100 if length == "n" else length
        feeds = {x: np.random.default_rng(0).standard_normal((28, size)).astype(np.float32)}
        (got, want), = run_both([y], feeds, {"n": size} if length == "n" else None)
        assert_same(got, want, lumos.f32, exact=False, what=f"{length} long")
        text = build(g).source.read_text()
        kernels = re.findall(r"^__attribute__\(\(weak\)\)(.*?)^}", text, re.M | re.S)
        (head,) = [k.split("\n")[0] for k in kernels if "acc += " in k]  # the sum's
        assert ("LUMOS_WIDE" in head) == wide, length
