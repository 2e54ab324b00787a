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


def linear_ticks(*axes: Any) -> None:
    """Tick labels of linear axes in the report's one number format (report.fmt.sig3: no '-0.0', no mixed
    notations); log axes keep matplotlib's 10ⁿ labels."""
    from flopwatch.report.fmt import tick_formatter

    for ax in axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "linear" and axis.get_major_formatter().__class__.__name__ == "ScalarFormatter":
                axis.set_major_formatter(tick_formatter())


def inch_margins(
    fig: Any,
    *,
    left: float = 0.75,
    right: float = 0.2,
    top: float = 0.45,
    bottom: float = 0.6,
    wspace: float | None = None,
    hspace: float | None = None,
) -> None:
    """Fixed margins in inches (the same on every figure size). Fixed margins instead of a layout engine: the
    constrained and tight engines measure every text extent before the real draw, which cost 25–35 % of each
    figure's CPU time here (benchmarks/bench_figures.py)."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=left / w, right=1 - right / w, top=1 - top / h, bottom=bottom / h, wspace=wspace, hspace=hspace
    )


def save(fig: Any, path: Path, watermark_text: str | None = None, *, dpi: int = 110) -> Path:
    """Watermark (if asked), write ``fig`` to ``path`` and close it.

    One render per figure: no ``tight_layout()`` (a full extra draw each) and no layout engine (margins are fixed
    by :func:`inch_margins`); the PNG is written at zlib level 3, to a temporary file renamed into place
    (:func:`flopwatch.io.atomic_path`: an interrupted save never leaves half a PNG).
    """
    from flopwatch.io import atomic_path

    watermark(fig, watermark_text)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, pil_kwargs={"compress_level": 3})
    pyplot().close(fig)
    return path
