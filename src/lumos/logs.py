"""Observability switches: LUMOS_LOG=egglog,search,memory,profile,cache (or 'all')."""

from __future__ import annotations

import os
import sys


def enabled(topic: str) -> bool:
    """True when `topic` is listed in the LUMOS_LOG environment variable."""
    topics = {t.strip() for t in os.environ.get("LUMOS_LOG", "").split(",") if t.strip()}
    return topic in topics or "all" in topics


def log(topic: str, message: str) -> None:
    """Print `message` to stderr, prefixed with its topic, when the topic is enabled."""
    if enabled(topic):
        print(f"[lumos:{topic}] {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """Always printed: something the user should know (a budget hit, a fallback)."""
    print(f"[lumos] warning: {message}", file=sys.stderr, flush=True)
