import pytest


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Compiled libraries of this session go to a temporary cache, not ~/.cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("LUMOS_CACHE", str(tmp_path_factory.mktemp("lumos-cache")))
    yield
    mp.undo()
