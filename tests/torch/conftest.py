"""The torch tests compile many small graphs; each times the CPU runtime's two seed programs
(`limit` 2) instead of the backend's default search, unless a test sets `limit` itself or is
marked `default_search` (benchmarks/unseen.py measures the default)."""

from collections.abc import Iterator

import pytest

import lumos.torch as lt


@pytest.fixture(autouse=True)
def _seeds_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("default_search") is None:
        monkeypatch.setattr(lt, "LIMIT", 2)
    yield
