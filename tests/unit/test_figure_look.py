"""Figures for a paper (issue 43): `edgetb plots --size W,H --dpi N --formats ... --style
paper|screen`. Measured on what is written: the PNG's pixels, the files per figure, the
text's font in the SVG; bad values are one line before anything is drawn."""

import re
import struct
import types
import warnings

import pytest

from analysis import figsave, plots
from analysis.synthetic import make_store
from common.errors import ConfigError


@pytest.fixture(autouse=True)
def default_look():
    yield
    figsave.set_look(figsave.Look())  # the next test draws as the command does by default


def _png_size(path):
    width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the IHDR chunk
    return width, height


def _one_figure(tmp_path, name):
    fig, ax = figsave.plt.subplots(figsize=figsave.sized(*figsave.DEFAULT_SIZE))
    ax.plot([0, 50, 100], [5, 105, 205], label="RF 3")
    ax.set_xlabel("one-way link latency (ms)")
    ax.legend()
    return figsave.save_figure(fig, tmp_path, name)


def test_size_and_dpi_set_the_pixels_and_formats_the_files(tmp_path):
    (default_png, *_others) = _one_figure(tmp_path, "default")
    assert sorted(p.suffix for p in [default_png, *_others]) == [".pdf", ".png", ".svg"]
    figsave.set_look(figsave.Look(size=(3.4, 2.4), dpi=300, formats=("png",)))
    assert [p.name for p in _one_figure(tmp_path, "column")] == ["column.png"]
    w0, h0 = _png_size(default_png)
    w1, h1 = _png_size(tmp_path / "column.png")
    # by default the drawing's tight box, about the figure's size; an asked size exactly
    assert 0.8 * 6.4 * 110 < w0 <= 1.1 * 6.4 * 110 and 0.8 * 4.2 * 110 < h0 <= 1.1 * 4.2 * 110
    assert (w1, h1) == (round(3.4 * 300), round(2.4 * 300)), (w0, h0, w1, h1)


def test_the_paper_style_draws_serif_8_pt_text_and_screen_comes_back(tmp_path):
    figsave.set_look(figsave.Look(style="paper", formats=("svg",)))
    (svg,) = _one_figure(tmp_path, "paper")
    text = svg.read_text()
    assert "font-size: 8px" in text and "serif" in text and "DejaVu Sans" not in text
    figsave.set_look(figsave.Look(formats=("svg",)))
    (svg,) = _one_figure(tmp_path, "screen")
    assert "DejaVu Sans" in svg.read_text() and figsave.matplotlib.rcParams["font.size"] == 10


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"size": "3.4"}, "--size must be W,H"),
        ({"size": "0.5,2"}, "--size must be W,H"),
        ({"size": "a,b"}, "--size must be W,H"),
        ({"dpi": 10}, "--dpi must be 50..1200"),
        ({"formats": "png,gif"}, "--formats must name some of png,svg,pdf"),
        ({"formats": ","}, "--formats must name"),
        ({"formats": "svg,pdf"}, "the report shows the PNGs"),
    ],
)
def test_bad_look_flags_are_one_line(flags, message):
    args = types.SimpleNamespace(
        **{"size": None, "dpi": 110, "formats": "png,svg,pdf", "style": "screen",
           "no_report": False, **flags}
    )  # fmt: skip
    with pytest.raises(ConfigError, match=message) as err:
        figsave.look_from(args)
    assert "\n" not in str(err.value)


def test_the_command_writes_only_the_asked_formats(tmp_path, capsys):
    make_store(tmp_path, nodes=(3, 5), losses=(0.5, 7.5), latencies=(0, 50), writes=30)
    flags = ["--formats", "svg", "--no-report", "--size", "3.4,2.4", "--style", "paper"]
    with warnings.catch_warnings():  # e.g. "constrained_layout not applied": a caption
        warnings.simplefilter("error")  # wider than a column, run off the figure
        assert plots.main([str(tmp_path), *flags]) == 0
    written = {p.suffix for p in (tmp_path / "analysis").iterdir() if p.stem.startswith("rtt")}
    assert written == {".svg"}, written
    # every text in the paper style's scale: the largest (a title) 8 pt, serif
    svg = (tmp_path / "analysis" / "rtt_n3_loss0.5.svg").read_text()
    sizes = {float(x) for x in re.findall(r"font-size: ([\d.]+)px", svg)}
    assert max(sizes) == 8 and min(sizes) >= 5 and "DejaVu Sans" not in svg, sizes
    assert "{svg}" in capsys.readouterr().out
