"""LUMOS_LOG=profile: the driver times each kernel and execute logs one line per kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest

import lumos
from lumos.runtime.cpu import CpuProgram, CpuRuntime
from tests.runtime.cpu.common import BASELINE


def _program() -> tuple[lumos.Tensor, lumos.Tensor, lumos.Tensor, CpuProgram]:
    g = lumos.Graph()
    a, b = g.tensor((64, 48), lumos.f32, "a"), g.tensor((64, 48), lumos.f32, "b")
    y = lumos.sqrt(a + b).output()  # Add and Sqrt: two kernels without fusion
    return a, b, y, g.compile(CpuRuntime(), BASELINE)


def test_profile_logs_each_kernel(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LUMOS_LOG", "profile")
    a, b, y, prog = _program()
    rng = np.random.default_rng(0)
    xa, xb = (rng.uniform(0, 4, (64, 48)).astype(np.float32) for _ in range(2))
    prog.set_data(a, xa)
    prog.set_data(b, xb)
    capsys.readouterr()
    prog.execute()
    lines = capsys.readouterr().err.splitlines()
    pattern = (r"\[lumos:profile\] kernel (\d) \(node \d+\) (\w+) f32\[64, 48\]: "
               r"[0-9.]+ us, [0-9.e+-]+ GB/s")
    matched = [re.fullmatch(pattern, line) for line in lines]
    assert all(matched) and [m.group(1) for m in matched] == ["0", "1"], lines
    np.testing.assert_array_equal(prog.get(y), np.sqrt(xa + xb))
    prog.execute()  # and again on every execute
    assert len(capsys.readouterr().err.splitlines()) == 2


def test_profile_off_leaves_source_unchanged(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LUMOS_LOG", "memory")
    *_, plain = _program()
    monkeypatch.setenv("LUMOS_LOG", "profile")
    *_, profiled = _program()
    source = plain.compiled.source.read_text()
    # (the clock is read per kernel only under a search's budget: see lumos_budget_ns)
    assert "lumos_profile_ns" not in source and "t = lumos_now()" not in source
    assert not plain.compiled.layout.profiled
    assert profiled.compiled.source != plain.compiled.source
    assert len(profiled.compiled.layout.profiled) == 2
