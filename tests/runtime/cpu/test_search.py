"""Timed search on CpuRuntime: a candidate is checked against the oracle before it can
become the best, and a candidate that crashes, hangs or computes the wrong thing loses."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import lumos
from lumos.egraph.buckets import combos
from lumos.record import recording
from lumos.runtime.cpu import CompileError, CpuRuntime
from lumos.runtime.cpu import program as program_module
from lumos.runtime.cpu.cc import UnsupportedProgram
from lumos.runtime.cpu.tune import PROFILING_BYTES, fits_profiling
from lumos.search import CompileOptions, GeneticSearch, Measured, Outcome, Rejected
from lumos.search.genome import Genome
from tests.runtime.cpu.common import assert_same, execute_both

ONE_SIZE = {"n": [(1, 64, 64)]}  # (a dim given no buckets is timed at two sizes)
OPTS = CompileOptions(limit=4, generation_size=4, trials=1, execution_timeout=5, search="genetic",
                      dim_buckets=ONE_SIZE)
DRIVER = "const int64_t *dims, char **stat) {\n"


def chain_graph() -> tuple[lumos.Tensor, lumos.Tensor, lumos.Tensor]:
    g = lumos.Graph()
    n = g.dim("n", 1, 64)
    x = g.tensor((n, 8), lumos.f32, "x")
    y = g.tensor((8,), lumos.f32, "y")
    out = ((x * 2 + y) * (y + 1)).sum(1).output()  # commutations give alternatives
    return x, y, out


def check(prog: lumos.runtime.base.Program, x: lumos.Tensor, y: lumos.Tensor,
          out: lumos.Tensor) -> None:
    rng = np.random.default_rng(1)
    for n in (1, 5, 64):
        feeds = {x: rng.standard_normal((n, 8)).astype(np.float32),
                 y: rng.standard_normal(8).astype(np.float32)}
        (got, want), = execute_both(prog, [out], feeds)
        assert_same(got, want, lumos.f32, exact=False)


def patch_candidates(monkeypatch: pytest.MonkeyPatch, bad: set[int], body: str) -> list[str]:
    """Candidates number `bad` (0-based, in compile order) get `body` at the start of
    their driver. Returns the sources of every candidate."""
    real = program_module.generate
    sources: list[str] = []

    def generate(*args, **kwargs):
        (source, *kernels), layout = real(*args, **kwargs)  # the driver comes first
        if len(sources) in bad:
            i = source.rindex(DRIVER) + len(DRIVER)
            source = source[:i] + body + source[i:]
        sources.append(source)
        return (source, *kernels), layout
    monkeypatch.setattr(program_module, "generate", generate)
    return sources


def test_search_returns_a_correct_program() -> None:
    x, y, out = chain_graph()
    prog = x.graph.compile(CpuRuntime(), OPTS)
    check(prog, x, y, out)


def test_a_dim_without_buckets_is_timed_at_its_upper_end_and_its_minimum(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from lumos.runtime.cpu import isolate, tune
    x, y, out = chain_graph()
    calls: list[tuple[str, dict]] = []
    real = isolate.Sandbox.run

    def run(self, fn, *args, **kwargs):
        if fn in (tune.differs, tune.timed):
            calls.append((fn.__name__, args[2]))
        return real(self, fn, *args, **kwargs)
    monkeypatch.setattr(isolate.Sandbox, "run", run)
    with recording() as rec:
        prog = x.graph.compile(CpuRuntime(), CompileOptions(limit=2, trials=1, cache=False))
    bucket, = rec.compiles[-1].buckets
    assert bucket.env == {"n": 64} and bucket.bucket == {"n": (1, 64, 64)}
    assert bucket.sizes == [{"n": 64}, {"n": 1}]
    # each candidate is timed at both sizes, then checked at both
    assert calls[:4] == [("timed", {"n": 64}), ("timed", {"n": 1}),
                         ("differs", {"n": 64}), ("differs", {"n": 1})]
    check(prog, x, y, out)


def test_a_default_size_whose_values_do_not_fit_is_lowered() -> None:
    g = lumos.Graph()
    g.dim("s", 1, 10**6)
    x = g.tensor(("s", 8), lumos.f32, "x")
    (x @ x.transpose(0, 1)).output()  # (s, s, 8) products: 6e13 bytes at the upper end
    fits = fits_profiling(g)
    bk, = combos(g.dims, {}, fits)
    s = bk["s"].representative
    assert 1 < s < 10**6 and fits({"s": s}) and not fits({"s": 2 * s})
    assert not fits({"s": 10**5}) and 64 * 10**4 <= PROFILING_BYTES


@pytest.mark.parametrize("body", ["  *(volatile int *)0 = 1;\n",  # segfault
                                  "  for (volatile int i = 0;; i++) {}\n"])  # hang
def test_crashing_or_hanging_candidates_are_invalid(monkeypatch: pytest.MonkeyPatch,
                                                     body: str) -> None:
    x, y, out = chain_graph()
    sources = patch_candidates(monkeypatch, {0, 2}, body)
    opts = CompileOptions(limit=4, generation_size=4, trials=1, execution_timeout=2,
                          search="genetic")
    prog = x.graph.compile(CpuRuntime(), opts)
    assert len(sources) >= 3
    assert body not in prog.compiled.source.read_text()
    check(prog, x, y, out)


@pytest.mark.parametrize("error, warned", [(CompileError, True), (UnsupportedProgram, False)])
def test_a_rejected_candidate_is_reported_unless_codegen_covers_no_such_program(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        error: type, warned: bool) -> None:
    """A candidate whose C fails (a lumos bug) is a warning; one that codegen writes no C
    for (a combination no kernel covers) only a log line; the search goes on either way."""
    x, y, out = chain_graph()
    real, calls = program_module.generate, []

    def generate(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise error("no C for this one")
        return real(*args, **kwargs)
    monkeypatch.setattr(program_module, "generate", generate)
    prog = x.graph.compile(CpuRuntime(), OPTS)
    assert ("search candidate rejected: no C for this one" in capsys.readouterr().err) == warned
    check(prog, x, y, out)


def test_a_wrong_but_fast_candidate_loses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrong candidate skips the work and the others spin for a while first: unchecked,
    it would win by far (the check runs in the sandbox: tune.differs)."""
    x, y, out = chain_graph()
    wrong = "  ((float *)out[0])[0] = 1e30f; return;\n"  # skips the work
    sources = patch_candidates(monkeypatch, {1}, wrong)
    patch_candidates(monkeypatch, {0, 2, 3}, "  for (volatile int i = 0; i < 1000000; i++) {}\n")
    prog = x.graph.compile(CpuRuntime(), OPTS)
    assert wrong in sources[1]
    assert wrong not in prog.compiled.source.read_text()
    check(prog, x, y, out)


def test_only_a_candidate_that_would_be_the_best_is_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A slower candidate costs no comparison with the oracle (it cannot win); the first
    one, and any faster than the best so far, is compared."""
    from lumos.runtime.cpu import isolate, tune
    x, y, out = chain_graph()
    checked: list[bool] = []  # per sandbox call: a check (else a timing)
    real = isolate.Sandbox.run

    def run(self, fn, *args, **kwargs):
        if fn in (tune.differs, tune.timed):
            checked.append(fn is tune.differs)
        return real(self, fn, *args, **kwargs)
    monkeypatch.setattr(isolate.Sandbox, "run", run)
    patch_candidates(monkeypatch, {1, 2, 3}, "  for (volatile int i = 0; i < 3000000; i++) {}\n")
    prog = x.graph.compile(CpuRuntime(), OPTS)
    assert checked == [False, True, False, False, False]  # timed, checked; then 3 timed
    check(prog, x, y, out)


def test_the_kernel_search_checks_every_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    """KernelSearch keeps parts of candidates that were not the best, so each one it times
    is also compared with the oracle; and it is told each kernel's time (a profile)."""
    from lumos.runtime.cpu import isolate, tune
    from lumos.search import KernelSearch
    x, y, out = chain_graph()
    calls: list[str] = []
    real = isolate.Sandbox.run
    reports = []
    real_report = KernelSearch.report

    def run(self, fn, *args, **kwargs):
        if fn in (tune.differs, tune.timed):
            calls.append(fn.__name__)
        return real(self, fn, *args, **kwargs)

    def report(self, genome, outcome):
        reports.append(outcome)
        real_report(self, genome, outcome)
    monkeypatch.setattr(isolate.Sandbox, "run", run)
    monkeypatch.setattr(KernelSearch, "report", report)
    prog = x.graph.compile(CpuRuntime(), CompileOptions(limit=6, trials=1, cache=False,
                                                        dim_buckets=ONE_SIZE))
    # each candidate timed whole is checked (one cut short has lost: it is not)
    assert calls[:2] == ["timed", "differs"] and "differs,differs" not in ",".join(calls)
    assert calls.count("differs") == sum(isinstance(o, Measured) and bool(o.kernels)
                                         for o in reports)
    assert any(o.kernels for o in reports)  # each kernel timed
    check(prog, x, y, out)


def test_a_compile_past_candidate_timeout_is_rejected(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """The first candidate's compiler hangs: it is killed at candidate_timeout, it is
    Rejected, and the search goes on to a correct program."""
    x, y, out = chain_graph()
    hang = tmp_path / "hanging-cc"
    hang.write_text("#!/bin/sh\nsleep 60\n")  # a child of the compiler's process, like cc1
    hang.chmod(0o755)
    real_compile = program_module.compile_units
    calls = []

    def compile_units(units: list[str]) -> Path:
        calls.append(units)
        with monkeypatch.context() as m:
            if len(calls) == 1:
                m.setenv("CC", str(hang))
            return real_compile(units)
    monkeypatch.setattr(program_module, "compile_units", compile_units)
    outcomes: list[Outcome] = []
    real_report = GeneticSearch.report

    def report(self: GeneticSearch, genome: Genome, outcome: Outcome) -> None:
        outcomes.append(outcome)
        real_report(self, genome, outcome)
    monkeypatch.setattr(GeneticSearch, "report", report)
    opts = CompileOptions(limit=3, generation_size=3, trials=1, execution_timeout=5,
                          candidate_timeout=3, search="genetic")
    start = time.monotonic()
    prog = x.graph.compile(CpuRuntime(), opts)
    assert time.monotonic() - start < 30  # the hanging compile was killed, not awaited
    assert isinstance(outcomes[0], Rejected) and "compile timed out" in outcomes[0].reason
    assert any(not isinstance(o, Rejected) for o in outcomes[1:])
    check(prog, x, y, out)


def test_when_every_compile_runs_past_the_limit_the_first_compiles_without_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A large program on a busy machine: each candidate's compile under the limit is
    killed, so nothing is measured; the first is then compiled with no limit and wins,
    instead of the compile failing."""
    from lumos.runtime.cpu import cc

    x, y, out = chain_graph()
    hang = tmp_path / "slow-cc"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(0o755)
    real_compile = program_module.compile_units
    limits = []

    def compile_units(units: list[str]) -> Path:
        limits.append(cc._LIMIT.get())
        with monkeypatch.context() as m:
            if limits[-1] is not None:  # under the limit: as slow as a busy machine
                m.setenv("CC", str(hang))
            return real_compile(units)
    monkeypatch.setattr(program_module, "compile_units", compile_units)
    opts = CompileOptions(limit=2, trials=1, execution_timeout=5, candidate_timeout=2)
    prog = x.graph.compile(CpuRuntime(), opts)
    assert "compiling the first one without the limit" in capsys.readouterr().err
    assert limits[:2] == [2, 2] and limits[-1] is None  # the two seeds, then no limit
    check(prog, x, y, out)


def test_an_input_under_a_root_is_drawn_positive() -> None:
    """A batch norm's running variance (under sqrt, after + eps) and a log's operand are
    drawn positive, so that the oracle's outputs are numbers a wrong candidate can miss;
    other inputs keep both signs."""
    from lumos.runtime.cpu.tune import profiling_inputs
    from lumos.runtime.reference import run_hlir
    g = lumos.Graph()
    x = g.tensor((4, 16), lumos.f32, "x")
    var = g.tensor((16,), lumos.f32, "var")
    s = g.tensor((16,), lumos.f32, "s")
    ((x * (var + 1e-5).rsqrt()).relu() + (s + 0.5).log2()).output()
    data = profiling_inputs(g, {}, 0)
    assert (data["var"] > 0).all() and (data["s"] > 0).all()
    assert (data["x"] < 0).any() and (data["x"] > 0).any()
    (out,) = run_hlir(g, data, {})
    assert np.isfinite(out).all() and (out != 0).any()
