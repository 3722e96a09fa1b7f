"""Figures of the analysis: pyplot on the Agg backend (no display needed) and one way of
saving a figure, in every format the figures are kept in. Imported where a figure is
drawn, so that commands that draw nothing do not load matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

from testbed.files import replacing

matplotlib.use("Agg")
# Text stays text: selectable and searchable in the SVG, TrueType in the PDF (what
# publishers ask for), not outlines.
matplotlib.rcParams.update({"svg.fonttype": "none", "pdf.fonttype": 42})
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402, F401  (matplotlib.ticker for the figures)

FORMATS = ("png", "svg", "pdf")  # the page's, the web's, a paper's
PNG_DPI = 110
# One style per series (an RF, a loss level): the Okabe-Ito colours, which stay apart
# for colour-blind readers, each with a marker and a dash pattern of its own, so that
# the lines also stay apart in greyscale and where they overlap.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
# no measured series is dotted: fine dots are the model's
DASHES = ("-", (0, (5, 1.5)), (0, (8, 2, 1.5, 2)), (0, (2.5, 1.5)),
          (0, (6, 1.5, 1.5, 1.5, 1.5, 1.5)), (0, (5, 1.5)), "-")  # fmt: skip
MODEL_STYLE: dict[str, Any] = {"ls": (0, (1, 2)), "lw": 1.2, "marker": None}

__all__ = [
    "FORMATS", "MODEL_STYLE", "label_overlaps", "log_ticks", "matplotlib", "plt",
    "save_figure", "series_style",
]  # fmt: skip


def series_style(i: int) -> dict[str, Any]:
    """Matplotlib keywords of the ``i``-th series of a figure."""
    k = i % len(COLOURS)
    return {"color": COLOURS[k], "marker": MARKERS[k], "ls": DASHES[k], "ms": 4, "lw": 1.4}


def save_figure(fig: Any, out: Path, name: str) -> list[Path]:
    """``fig`` as OUT/NAME.png and OUT/NAME.svg, then closed; the paths written."""
    paths = []
    for fmt in FORMATS:
        path = out / f"{name}.{fmt}"
        with replacing(path, "wb") as f:  # never through a name planted in OUT
            fig.savefig(f, format=fmt, dpi=PNG_DPI if fmt == "png" else None, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def label_overlaps(fig: Any) -> list[str]:
    """Tick labels of one axis of ``fig`` that overlap each other as drawn (major and
    minor: a log axis labels both), each pair named; [] for a figure a reader can read."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            labels = [
                (t.get_text(), t.get_window_extent(renderer))
                for t in axis.get_ticklabels(which="both")
                if t.get_visible() and t.get_text()
            ]
            for i, (a, box_a) in enumerate(labels):
                for b, box_b in labels[i + 1 :]:
                    if box_a.overlaps(box_b):
                        found.append(f"{ax.get_title() or 'axes'}: {name} labels {a!r}, {b!r}")
    return found


def log_ticks(axis: Any, low: float, high: float) -> None:
    """A log ``axis`` over [low, high] labelled in plain numbers a reader can tell apart:
    1-2-5 in each decade where the range spans under two decades, else the decades only;
    minor ticks unlabelled (matplotlib's own mix of 10, 100 and 2x10^1 labels overlapped
    between 12 and 250 ms)."""
    decades = np.log10(max(high, low * 1.0001) / low) if low > 0 else 3.0
    subs = (1.0, 2.0, 5.0) if decades < 2 else (1.0,)
    axis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=subs))
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
