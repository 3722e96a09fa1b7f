"""Figures of the analysis: pyplot on the Agg backend (no display needed) and one way of
saving a figure, in every format the figures are kept in. Imported where a figure is
drawn, so that commands that draw nothing do not load matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FORMATS = ("png", "svg")
PNG_DPI = 110

__all__ = ["FORMATS", "plt", "save_figure"]


def save_figure(fig: Any, out: Path, name: str) -> list[Path]:
    """``fig`` as OUT/NAME.png and OUT/NAME.svg, then closed; the paths written."""
    paths = []
    for fmt in FORMATS:
        path = out / f"{name}.{fmt}"
        fig.savefig(path, dpi=PNG_DPI if fmt == "png" else None, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths
