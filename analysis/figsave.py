"""Figures of the analysis: pyplot on the Agg backend (no display needed) and one way of
saving a figure, in every format the figures are kept in. Imported where a figure is
drawn, so that commands that draw nothing do not load matplotlib."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

from common.errors import ConfigError
from common.files import replacing

matplotlib.use("Agg")
# Text stays text: selectable and searchable in the SVG, TrueType in the PDF (what
# publishers ask for), not outlines.
matplotlib.rcParams.update({"svg.fonttype": "none", "pdf.fonttype": 42})
import matplotlib.layout_engine  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.text  # noqa: E402
import matplotlib.ticker  # noqa: E402, F401  (matplotlib.ticker for the figures)

FORMATS = ("png", "svg", "pdf")  # the page's, the web's, a paper's
PNG_DPI = 110
# the size of a one-panel figure (inches); panels of a grid are sized from it
DEFAULT_SIZE = (6.4, 4.2)
# rcParams of each --style: "screen" is matplotlib's own; "paper" suits a journal
# column (3.4 in wide): serif text of 8 pt, thinner lines and markers
STYLES: dict[str, dict[str, Any]] = {
    "screen": {},
    "paper": {
        "font.family": "serif",
        "font.size": 8,
        "axes.titlesize": 8,
        "axes.labelsize": 8,
        "legend.fontsize": 7,
        "xtick.labelsize": 7,
        "ytick.labelsize": 7,
        "lines.linewidth": 1.0,
        "lines.markersize": 3,
        "axes.linewidth": 0.6,
    },
}


@dataclass(frozen=True)
class Look:
    """How figures are saved: ``size`` (inches) of a one-panel figure (None: each
    figure's own; a grid of panels is scaled by as much), PNG ``dpi``, the ``formats``
    written, the ``style``'s rcParams (set before any figure is drawn)."""

    size: tuple[float, float] | None = None
    dpi: int = PNG_DPI
    formats: tuple[str, ...] = FORMATS
    style: str = "screen"


_look = Look()
_footer = ""  # the caveat under every figure of measured cells (``footer``)
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
    "FORMATS", "MODEL_STYLE", "STYLES", "Look", "add_look_flags", "footer", "label_overlaps",
    "log_ticks", "outside", "sized", "top_legend",
    "look_from", "matplotlib", "plt", "pt", "save_figure", "series_style", "set_look",
]  # fmt: skip


def pt(size: float) -> float:
    """A font size of the screen look (10-pt text) in the current style: the same on a
    screen, 0.8 of it in the paper style (8-pt text)."""
    return size * float(matplotlib.rcParams["font.size"]) / 10


def series_style(i: int) -> dict[str, Any]:
    """Matplotlib keywords of the ``i``-th series of a figure."""
    k = i % len(COLOURS)
    return {"color": COLOURS[k], "marker": MARKERS[k], "ls": DASHES[k], "ms": 4, "lw": 1.4}


def add_look_flags(parser: Any) -> None:
    """--size, --dpi, --formats and --style (``look_from`` reads them)."""
    w, h = DEFAULT_SIZE
    parser.add_argument(
        "--size",
        metavar="W,H",
        help=f"a one-panel figure's size in inches; grids of panels scale by as much "
        f"(default {w:g},{h:g}; a journal column: 3.4,2.4)",
    )
    parser.add_argument(
        "--dpi", type=int, default=PNG_DPI, help=f"PNG dots per inch (default {PNG_DPI})"
    )
    parser.add_argument(
        "--formats",
        default=",".join(FORMATS),
        help=f"files written per figure, some of {','.join(FORMATS)} (default all)",
    )
    parser.add_argument(
        "--style",
        default="screen",
        choices=sorted(STYLES),
        help="screen (default) or paper: serif 8-pt text, thinner lines",
    )


def look_from(args: Any) -> Look:
    """The Look of ``add_look_flags``' flags; ConfigError (one line) for a bad value."""
    size = None
    if args.size is not None:
        parts = args.size.replace("x", ",").split(",")
        try:
            size = (float(parts[0]), float(parts[1])) if len(parts) == 2 else None
        except ValueError:
            size = None
        if size is None or not all(1 <= x <= 30 for x in size):
            raise ConfigError(f"--size must be W,H in inches, each 1..30, got {args.size!r}")
    if not 50 <= args.dpi <= 1200:
        raise ConfigError(f"--dpi must be 50..1200, got {args.dpi}")
    formats = tuple(dict.fromkeys(x.strip().lower() for x in args.formats.split(",") if x.strip()))
    if not formats or set(formats) - set(FORMATS):
        raise ConfigError(f"--formats must name some of {','.join(FORMATS)}, got {args.formats!r}")
    if "png" not in formats and not getattr(args, "no_report", True):
        raise ConfigError("the report shows the PNGs: keep png in --formats, or add --no-report")
    return Look(size=size, dpi=args.dpi, formats=formats, style=args.style)


def set_look(look: Look) -> None:
    """Save every later figure with ``look``, and draw it in its style: at its size
    exactly when one is asked (constrained layout), else in its drawing's tight box."""
    global _look
    rc: Any = matplotlib.rcParams  # (typed with a Literal of every key)
    defaults: Any = matplotlib.rcParamsDefault
    styled = {key for style in STYLES.values() for key in style}  # back to matplotlib's own
    rc.update({key: defaults[key] for key in styled})
    rc.update(STYLES[look.style])
    _look = look


@contextmanager
def footer(text: str) -> Iterator[None]:
    """Figures saved inside carry ``text`` in small grey type under their drawing (the
    sample's caveat: ``analysis.results.Results.caveat``)."""
    global _footer
    before, _footer = _footer, text
    try:
        yield
    finally:
        _footer = before


def sized(width: float, height: float) -> tuple[float, float]:
    """A figure's size (inches) for its drawer's ``width`` x ``height`` at the default look:
    as is, or scaled as a one-panel figure of DEFAULT_SIZE is to the asked ``--size``. A
    drawer makes its figure at this size, so that what it places by measuring (labels
    apart, a legend pinned) is measured as it will be saved."""
    if _look.size is None:
        return width, height
    return width * _look.size[0] / DEFAULT_SIZE[0], height * _look.size[1] / DEFAULT_SIZE[1]


def save_figure(fig: Any, out: Path, name: str) -> list[Path]:
    """``fig`` as OUT/NAME in each format of the look (PNG, SVG and PDF by default),
    with the ``footer`` in force under it, then closed; the paths written."""
    box: str | None = "tight"  # the drawing's own box, whitespace trimmed
    if _look.size is not None:  # the asked size exactly (a journal's column, ``sized``),
        for text in fig.findobj(matplotlib.text.Annotation):  # captions under an axis
            text.set_wrap(True)  # wrap at the figure's edge, not run past it
        strip = _footer_strip(fig)  # the rect: left, bottom, width, height
        fig.set_layout_engine(_AboveFooter(strip))
        _fit_texts(fig)
        _fit_legends(fig)
        box = None
    else:  # under everything drawn (captions included): the tight box grows to hold it
        _add_footer(fig, below=True)
    paths = []
    for fmt in _look.formats:
        path = out / f"{name}.{fmt}"
        with replacing(path, "wb") as f:  # never through a name planted in OUT
            fig.savefig(f, format=fmt, dpi=_look.dpi if fmt == "png" else None, bbox_inches=box)
        paths.append(path)
    plt.close(fig)
    return paths


def top_legend(
    fig: Any, handles: list[Any], labels: list[str], ncol: int | None = None, **style: Any
) -> Any:
    """One legend of a grid of panels, above them, in one row (or ``ncol`` columns) where
    the figure is wide enough; a fixed ``--size`` narrower than the row gets fewer columns
    (``save_figure``)."""
    columns = len(labels) if ncol is None else ncol
    legend = fig.legend(handles, labels, loc="outside upper center", ncol=columns, **style)
    legend._made_by = (handles, labels, style)  # to be made again with fewer columns
    return legend


class _AboveFooter(matplotlib.layout_engine.ConstrainedLayoutEngine):
    """Constrained layout above a strip of the figure's bottom (``strip``, a share of its
    height) kept for the footer; the figure's x label too, which matplotlib's layout puts
    on the bottom edge whatever the rect (under the footer)."""

    def __init__(self, strip: float) -> None:
        super().__init__(rect=(0, strip, 1, 1 - strip))
        self.strip = strip

    def execute(self, fig: Any) -> Any:
        done = super().execute(fig)
        label = getattr(fig, "_supxlabel", None)
        if label is not None and getattr(label, "_autopos", False):  # set again each time
            label.set_y(label.get_position()[1] + self.strip)
        return done


def _wrapped(text: str, width: float, wide: float) -> str | None:
    """``text``, drawn ``wide`` (pixels), in lines that fit ``width``; None if it fits."""
    if wide <= width or "\n" in text or not text.strip():
        return None
    return textwrap.fill(text, max(12, int(len(text) * 0.95 * width / wide)))


def _fit_texts(fig: Any) -> None:
    """Titles and axis labels longer than their axes at a fixed size, wrapped in lines
    the layout then makes room for (matplotlib's own wrapping happens after the layout)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    changed = False
    for ax in fig.axes:
        box = ax.bbox
        for text, room in ((ax.title, box.width), (ax.xaxis.label, box.width),
                           (ax.yaxis.label, box.height)):  # fmt: skip
            extent = text.get_window_extent(renderer)
            wide = extent.height if text is ax.yaxis.label else extent.width
            lines = _wrapped(text.get_text(), room, wide)
            if lines is not None:
                text.set_text(lines)
                changed = True
    if changed:
        fig.canvas.draw()


def _fit_legends(fig: Any) -> None:
    """A ``top_legend`` wider than a fixed-size figure: its title in lines, then fewer
    columns, until it fits (or has one column)."""
    renderer = fig.canvas.get_renderer()

    def remake(legend: Any, columns: int, style: dict[str, Any]) -> Any:
        legend.remove()
        handles, labels, _ = legend._made_by
        new = top_legend(fig, handles, labels, ncol=columns, **style)
        fig.canvas.draw()
        return new

    for legend in [leg for leg in fig.legends if getattr(leg, "_made_by", None)]:
        style, columns = legend._made_by[2], legend._ncols
        title = legend.get_title()
        lines = _wrapped(title.get_text(), fig.bbox.width, title.get_window_extent(renderer).width)
        if lines is not None:
            style = {**style, "title": lines}
            legend = remake(legend, columns, style)
        while columns > 1 and legend.get_window_extent(renderer).width > fig.bbox.width:
            columns -= 1
            legend = remake(legend, columns, style)


def outside(fig: Any) -> list[str]:
    """What of ``fig`` as laid out runs past its edges (each axes with its title, labels
    and drawn ticks; the figure's texts and legends), or lies under its footer, each
    named; [] when all fits (a saved figure too: it is drawn again)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    # the saved figure's edges: an asked size's (a pixel of rounding); by default the
    # saved box is the drawing's own, which holds all of it (only overlaps count)
    edge = fig.bbox.padded(1) if _look.size is not None else None
    parts = [(f"axes {ax.get_title()!r}", ax.get_tightbbox(renderer)) for ax in fig.axes]
    parts += [
        (f"text {t.get_text()[:40]!r}", t.get_window_extent(renderer))
        for t in fig.texts
        if t.get_visible() and t.get_text() and not getattr(t, "_is_footer", False)
    ]
    parts += [("legend", leg.get_window_extent(renderer)) for leg in fig.legends]
    over = [  # a legend inside an axes stays in its frame (not over its title)
        f"legend of {ax.get_title()!r} past its axes"
        for ax in fig.axes
        if ax.get_legend() is not None
        and not _inside(ax.get_legend().get_window_extent(renderer), ax.bbox.padded(1))
    ]
    feet = [t.get_window_extent(renderer) for t in fig.texts if getattr(t, "_is_footer", False)]
    found = [
        f"{what}: {[round(v) for v in box.extents]} past {[round(v) for v in fig.bbox.extents]}"
        for what, box in [*parts, *(("footer", f) for f in feet)]
        if box is not None and edge is not None and not _inside(box, edge)
    ]
    return (
        found
        + over
        + [  # the caveat under the figure, over nothing of it
            f"footer over {what}"
            for what, box in parts
            for foot in feet
            if box is not None and foot.overlaps(box)
        ]
    )


def _inside(box: Any, edge: Any) -> bool:
    return edge.x0 <= box.x0 and box.x1 <= edge.x1 and edge.y0 <= box.y0 and box.y1 <= edge.y1


def _add_footer(fig: Any, below: bool) -> Any:
    """The ``footer`` as a text of ``fig``: ``below`` everything drawn so far, else on
    the bottom edge, wrapped at the figure's width; None without a footer."""
    if not _footer:
        return None
    style = {"ha": "left", "fontsize": pt(7), "color": "0.35"}
    if not below:  # wrapped here, so that the layout knows its height
        text = fig.text(0.005, 0.005, _footer, va="bottom", **style)
        text._is_footer = True
        fig.canvas.draw()
        wide = text.get_window_extent(fig.canvas.get_renderer()).width
        text.set_text(_wrapped(_footer, 0.99 * fig.bbox.width, wide) or _footer)
        return text
    fig.canvas.draw()
    drawn = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    w, h = fig.get_size_inches()
    text = fig.text(drawn.x0 / w, (drawn.y0 - 0.05) / h, _footer, va="top", wrap=True, **style)
    text._is_footer = True
    return text


def _footer_strip(fig: Any) -> float:
    """The share of a fixed-size figure's height kept free at its bottom for the footer
    (its wrapped lines and a margin), 0 without one; the footer drawn there."""
    text = _add_footer(fig, below=False)
    if text is None:
        return 0.0
    fig.canvas.draw()
    lines = text.get_window_extent(fig.canvas.get_renderer())  # drawn wrapped: all its lines
    return min(0.3, (lines.height / fig.dpi + 0.06) / fig.get_size_inches()[1])


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
