"""`lumos info`: the ISA features it prints are the ones /proc/cpuinfo lists, the cache
counts what is in $LUMOS_CACHE, and `--clear` empties it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from lumos import cli
from lumos.cli.info import ARM_FEATURES, X86_FEATURES
from lumos.search.verdicts import Verdicts


def info(capsys, *args: str) -> dict[str, str]:
    assert cli.main(["info", *args]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        key, value = re.fullmatch(r"\s*(\S.*?)\s{2,}(.*)", line).groups()
        rows[key] = value
    return rows


def test_machine(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path))
    rows = info(capsys)
    for key in ("cpu", "cores", "isa", "caches", "memory", "c compiler", "blas", "cuda"):
        assert rows.get(key), key
    text = Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines()
                  if ln.startswith(("flags", "Features"))), [])
    table = X86_FEATURES if any(ln.startswith("flags") for ln in text.splitlines()) \
        else ARM_FEATURES
    have = [name for f, name in table if f in flags]
    assert rows["isa"] == (" ".join(have) or "none of those lumos looks for")
    assert str(os.cpu_count()) in rows["cores"]
    assert "scipy-openblas32" in rows["blas"]
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    mode = re.search(r"\[(\w+)\]", thp.read_text()).group(1) if thp.exists() else None
    assert rows["huge pages"].startswith(f"{mode}" if mode else "not offered"), rows


def test_cache_and_clear(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path))
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "a.lar").write_bytes(b"x" * 2**20)
    (tmp_path / "cpu").mkdir()
    for name in ("k1.so", "k2.so", "k1.o"):
        (tmp_path / "cpu" / name).write_bytes(b"y" * 1000)
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "w.gguf").write_bytes(b"z" * 2**21)
    (tmp_path / "mine.txt").write_text("not lumos'")
    Verdicts("here").save({"a": True, "b": False})
    rows = info(capsys)
    assert rows["search"].endswith("MiB, 2 verdicts of earlier searches")
    assert rows["weights"] == "2.0 MiB, 1 weight files joined from chunk packages"
    assert rows["artifacts"] == "1.0 MiB, 1 artifacts (saved choices)"
    assert rows["kernels"] == "0.0 MiB, 2 compiled kernel libraries"
    rows = info(capsys, "--clear")
    assert rows["artifacts"] == "0.0 MiB, 0 artifacts (saved choices)" and "cleared" in rows
    assert not (tmp_path / "cpu").exists() and (tmp_path / "mine.txt").exists()
    assert not (tmp_path / "weights").exists()  # (joined again when next used)
    assert rows["search"] == "0.0 MiB, 0 verdicts of earlier searches"


@pytest.mark.slow
def test_bandwidth(capsys):
    gbs = float(info(capsys, "--bandwidth")["copy bandwidth"].split()[0])
    assert gbs > 0.1
