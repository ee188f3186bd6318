"""A loss curve as a PNG, drawn with Pillow (installed with lumos[models]): the training
examples' `--png`. Log-scale y axis, the first and last values labelled."""

from __future__ import annotations

import math
from collections.abc import Sequence


def save_curve(values: Sequence[float], path: str, title: str = "loss") -> None:
    from PIL import Image, ImageDraw

    w, h, pad = 640, 400, 48
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    logs = [math.log10(max(v, 1e-12)) for v in values]
    lo, hi = min(logs), max(logs)
    span = (hi - lo) or 1.0
    pts = [(pad + (w - 2 * pad) * i / max(len(logs) - 1, 1),
            h - pad - (h - 2 * pad) * (v - lo) / span) for i, v in enumerate(logs)]
    draw.rectangle((pad, pad, w - pad, h - pad), outline="gray")
    if len(pts) > 1:
        draw.line(pts, fill="navy", width=2)
    draw.text((pad, 12), f"{title} (log scale), {len(values)} steps", fill="black")
    draw.text((pad + 4, pad + 4), f"{values[0]:.4g}", fill="black")
    draw.text((w - pad - 60, h - pad - 16), f"{values[-1]:.4g}", fill="black")
    img.save(path)
