"""Shared matplotlib plumbing for every figure flopwatch draws (Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, imported lazily (the core import stays light)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def watermark(fig: Any, text: str | None) -> None:
    """Draw ``text`` faintly across ``fig``: a simulated run's PNG must never pass for a measurement
    when it travels without its report."""
    if text:
        fig.text(
            0.5,
            0.5,
            text,
            fontsize=60,
            color="red",
            alpha=0.08,
            ha="center",
            va="center",
            rotation=25,
            transform=fig.transFigure,
        )


def save(fig: Any, path: Path, watermark_text: str | None = None, *, dpi: int = 110) -> Path:
    """Watermark (if asked), write ``fig`` to ``path`` and close it."""
    from flopwatch.io import atomic_path

    watermark(fig, watermark_text)
    with atomic_path(path) as tmp:  # temp file + rename: an interrupted save never leaves half a PNG
        fig.savefig(tmp, dpi=dpi)
    pyplot().close(fig)
    return path
