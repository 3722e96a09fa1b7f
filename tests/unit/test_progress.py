"""The sweep's progress display: plain lines off a terminal, the rich live display on one,
the ETA's scale, and calls from several shard threads at once."""

import io
import threading

import pytest

from experiments.run import progress as progress_mod
from experiments.run.progress import Progress, describe
from experiments.settings.cells import Cell

CELL = Cell(nodes=3, rf=2, latency_ms=50, loss_pct=7.5, repetition=0)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Remaining:
    """A fake remaining_s: records the scales it is called with."""

    def __init__(self, seconds: float = 600.0) -> None:
        self.seconds = seconds
        self.scales: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, scale: float) -> float:
        with self.lock:
            self.scales.append(scale)
        return self.seconds * scale


class TtyIO(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress_mod, "monotonic", c)
    return c


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_cell_line_names_the_shard_the_counts_and_the_eta(clock):
    out, remaining = io.StringIO(), Remaining(600)
    p = Progress(total=10, done=3, remaining_s=remaining, stream=out)
    p.cell_started("s1", CELL, writes=100)
    p.wrote("s1", 40)
    clock.t += 65
    p.cell_done("s1", CELL, estimated_s=3.0, summary="mean 101.00 ms")
    p.close()
    assert lines(out) == [
        f"[4/10] s1 {describe(CELL)}: mean 101.00 ms | elapsed 1m05s ETA 10m00s",
    ]
    assert remaining.scales == [1.0]  # 3 s of model time: not enough to rescale
    assert p.done == 4
    assert p.rows()[0].cell is None  # the shard's row stays, between cells


def test_scale_is_measured_over_model_time_once_past_5_s_and_clamped(clock):
    out, remaining = io.StringIO(), Remaining(100)
    p = Progress(total=10, done=0, remaining_s=remaining, stream=out)

    def cell(estimated_s: float, measured_s: float) -> None:
        p.cell_started("s0", CELL, writes=10)
        clock.t += measured_s
        p.cell_done("s0", CELL, estimated_s=estimated_s, summary="ok")

    cell(4, 40)  # 4 s of model time so far: scale 1
    cell(4, 8)  # 8 s of model time, 48 s measured: 6, clamped to 5
    cell(32, 4)  # 40 s of model time, 52 s measured: 1.3
    cell(160, 8)  # 200 s of model time, 60 s measured: 0.3
    cell(400, 0)  # 600 s, 60 s: 0.1, clamped to 0.3
    assert remaining.scales == pytest.approx([1.0, 5.0, 1.3, 0.3, 0.3])
    assert [line.rsplit(" ETA ", 1)[1] for line in lines(out)] == [
        "1m40s",
        "8m20s",
        "2m10s",
        "0m30s",
        "0m30s",
    ]


def test_measured_time_runs_from_the_shards_own_cell_started(clock):
    remaining = Remaining()
    p = Progress(total=4, done=0, remaining_s=remaining, stream=io.StringIO())
    p.cell_started("a", CELL, writes=10)
    clock.t += 10
    p.cell_started("b", CELL, writes=10)
    clock.t += 10
    p.cell_done("a", CELL, estimated_s=10, summary="")  # 20 s measured
    clock.t += 20
    p.cell_done("b", CELL, estimated_s=10, summary="")  # 30 s measured
    assert remaining.scales == pytest.approx([2.0, 2.5])
    # a cell_done without cell_started adds no time either way
    p.cell_done("c", CELL, estimated_s=100, summary="")
    assert remaining.scales[-1] == pytest.approx(2.5)
    assert p.done == 3


def test_notes_with_and_without_shard_are_plain_lines():
    out = io.StringIO()
    p = Progress(total=2, done=0, remaining_s=Remaining(), stream=out)
    p.note("tearing the 3-node cluster down")
    p.note("bringing up 5 nodes [gateway]", shard="s2")
    p.shard_status("s2", "waiting for the machine")  # a row only: no line off a terminal
    p.close()
    assert lines(out) == [
        "tearing the 3-node cluster down",
        "[s2] bringing up 5 nodes [gateway]",
    ]


def test_no_escape_codes_off_a_terminal_even_with_force_color(monkeypatch, clock):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "20")
    out = io.StringIO()
    p = Progress(total=2, done=0, remaining_s=Remaining(), stream=out)
    long = "x" * 200
    p.note(long, shard="s0")
    p.cell_started("s0", CELL, writes=5)
    p.cell_done("s0", CELL, estimated_s=1, summary=long)
    p.close()
    text = out.getvalue()
    assert "\x1b" not in text
    assert f"[s0] {long}\n" in text  # not wrapped at the console width
    assert len(lines(out)) == 2


def test_shard_rows_status_cell_and_writes():
    p = Progress(total=2, done=0, remaining_s=Remaining(), stream=io.StringIO())
    p.shard_status("s0", "bringing up 5 nodes")
    p.shard_status("s1", "network 50 ms / 7.5 %")
    p.cell_started("s1", CELL, writes=100)
    p.wrote("s1", 42)
    p.wrote("nobody", 1)  # no row: ignored
    rows = {r.shard: r for r in p.rows()}
    assert list(rows) == ["s0", "s1"]
    assert rows["s0"].status == "bringing up 5 nodes" and rows["s0"].cell is None
    assert (rows["s1"].cell, rows["s1"].written, rows["s1"].writes) == (CELL, 42, 100)
    p.shard_done("s0")
    assert [r.shard for r in p.rows()] == ["s1"]
    p.close()


def test_threads_at_once_count_right():
    out, remaining = io.StringIO(), Remaining()
    shards, cells_each, writes = 8, 25, 50
    total = shards * cells_each + 5
    p = Progress(total=total, done=5, remaining_s=remaining, stream=out)
    start = threading.Barrier(shards)

    def shard(name: str) -> None:
        start.wait()
        p.shard_status(name, "bringing up")
        for i in range(cells_each):
            p.cell_started(name, CELL, writes)
            for n in range(1, writes + 1):
                p.wrote(name, n)
            p.cell_done(name, CELL, estimated_s=0.1, summary=f"cell {i}")
            p.note("between cells", shard=name)
        p.shard_done(name)

    threads = [threading.Thread(target=shard, args=(f"s{k}",)) for k in range(shards)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p.close()
    assert p.done == total
    assert p.rows() == []
    cell_lines = [line for line in lines(out) if line.startswith("[") and "/" in line[:9]]
    counts = sorted(int(line[1 : line.index("/")]) for line in cell_lines)
    assert counts == list(range(6, total + 1))
    for k in range(shards):
        assert sum(f"] s{k} " in line for line in cell_lines) == cells_each
        assert lines(out).count(f"[s{k}] between cells") == cells_each
    assert len(remaining.scales) == shards * cells_each


def test_live_display_on_a_terminal(clock):
    out = TtyIO()
    p = Progress(total=3, done=1, remaining_s=Remaining(), stream=out)
    assert p.tty
    p.shard_status("shard-east", "bringing up 3 nodes")
    p.cell_started("shard-east", CELL, writes=100)
    p.wrote("shard-east", 50)
    p.note("a note", shard="shard-east")
    clock.t += 2
    p.cell_done("shard-east", CELL, estimated_s=1, summary="mean 1.00 ms")
    p.shard_done("shard-east")
    p.close()
    p.close()  # idempotent
    p.note("after the display")  # still printable
    text = out.getvalue()
    assert "shard-east" in text
    assert "bringing up 3 nodes" in text
    assert "[shard-east] a note" in text
    assert f"[2/3] shard-east {describe(CELL)}: mean 1.00 ms" in text
    assert "2/3 cells" in text
    assert text.rstrip().endswith("after the display")


def test_live_display_with_threads_does_not_deadlock():
    out = TtyIO()
    p = Progress(total=40, done=0, remaining_s=Remaining(), stream=out)

    def shard(name: str) -> None:
        for _ in range(10):
            p.shard_status(name, "network")
            p.cell_started(name, CELL, 20)
            for n in range(20):
                p.wrote(name, n)
            p.note("x", shard=name)
            p.cell_done(name, CELL, estimated_s=0.01, summary="ok")
        p.shard_done(name)

    threads = [threading.Thread(target=shard, args=(f"t{k}",), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    p.close()
    assert p.done == 40
    assert "[40/40] t" in out.getvalue()
