"""What earlier searches learned, kept across compiles, buckets and models: the verdict
(kept or not) on each KernelSearch move, by the move's signature (the code of the kernels
it touches, where it lies in them, the e-node it picks: `local._signature`), under the
conditions it was measured in (`where`: the runtime, CPU, compiler and flags, threads and
the sizes timed at). A later search that meets the same move in the same kernels (another
layer, bucket or model, or the same model compiled again) takes the verdict instead of
timing it: a move rejected before is not tried, one kept before is tried first.

    store = Verdicts(where)        # $LUMOS_CACHE/search.sqlite
    search = KernelSearch(space, options, known=store.load())
    ...
    store.save(search.learned())

LUMOS_CACHE=off, a file that cannot be opened or written and a corrupt one all mean no
store (nothing recalled, nothing kept), never an error.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path

from lumos.logs import log
from lumos.paths import cache_off, cache_root

FILE = "search.sqlite"


def store_path() -> Path | None:
    """Where the verdicts live; None when LUMOS_CACHE=off."""
    if cache_off():
        return None
    return cache_root() / FILE


def stored(path: Path) -> int:
    """How many verdicts the store at `path` holds (0 if none can be read)."""
    if not path.is_file():
        return 0
    try:
        with closing(sqlite3.connect(path, timeout=10.0)) as db:
            return int(db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])
    except sqlite3.Error:
        return 0


class Verdicts:
    """The verdicts measured under the conditions `where` names (any text)."""

    def __init__(self, where: str, path: Path | None = None) -> None:
        self.where = hashlib.sha256(where.encode()).hexdigest()[:32]
        self.path = path if path is not None else store_path()

    def _connect(self) -> sqlite3.Connection:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=10.0)
        db.execute("CREATE TABLE IF NOT EXISTS verdicts (machine TEXT, signature TEXT, "
                   "kept INTEGER, PRIMARY KEY (machine, signature))")
        return db

    def load(self) -> dict[str, bool]:
        """Every verdict kept under these conditions (none without a store)."""
        if self.path is None:
            return {}
        try:
            with closing(self._connect()) as db:
                rows = db.execute("SELECT signature, kept FROM verdicts WHERE machine = ?",
                                  (self.where,)).fetchall()
        except (sqlite3.Error, OSError) as e:
            log("cache", f"search verdicts not read from {self.path}: {e}")
            return {}
        log("cache", f"{len(rows)} search verdicts recalled from {self.path}")
        return {s: bool(k) for s, k in rows}

    def save(self, verdicts: Mapping[str, bool]) -> None:
        """Keeps `verdicts` (replacing older ones of the same moves)."""
        if self.path is None or not verdicts:
            return
        try:
            with closing(self._connect()) as db, db:
                db.executemany("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?)",
                               [(self.where, s, int(k)) for s, k in verdicts.items()])
        except (sqlite3.Error, OSError) as e:
            log("cache", f"search verdicts not saved to {self.path}: {e}")
