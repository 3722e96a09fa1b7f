"""The parallel sweep's shards without testbeds: signals while shards tear down, and the
store's record of a testbed whose bring-up failed (fakes for Testbed, store, progress)."""

import signal
import threading
from typing import Any, cast

import pytest

from experiments.plan import shards as plan
from experiments.run import scheduler
from experiments.run.scheduler import Shard, Sweep
from experiments.settings.config import SweepConfig


class FakeProgress:
    def __init__(self, slow: bool = False) -> None:
        self.notes: list[str] = []
        # a slow terminal (``slow``): a note prints until ``printed`` is set
        self.slow = slow
        self.printing = threading.Event()
        self.printed = threading.Event()

    def note(self, message: str, shard: str | None = None) -> None:
        self.notes.append(message)
        if self.slow:
            self.printing.set()
            assert self.printed.wait(120), "the note was never let through"

    def shard_status(self, shard: str, text: str) -> None:
        pass

    def shard_done(self, shard: str) -> None:
        pass


class FakeStore:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def testbed_started(self, run_id: str, testbed_run: str, nodes: int) -> None:
        self.calls.append(("started", testbed_run))

    def testbed_down(self, testbed_run: str) -> None:
        self.calls.append(("down", testbed_run))

    def update_manifest(self, run_id: str, **entries: Any) -> None:
        self.calls.append(("manifest", entries))


def make_sweep(tmp_path, progress=None, parallel=2) -> Sweep:
    config = SweepConfig(
        nodes=(3,), latency_ms=(50.0, 100.0), loss_pct=(0.5,), out=str(tmp_path / "res")
    )
    fakes: Any = (FakeStore(), progress or FakeProgress())
    return Sweep(config, fakes[0], "run1", fakes[1], parallel=parallel)


def calls(sweep: Sweep) -> list[tuple]:
    return cast(Any, sweep.store)._store.calls


def test_ctrl_c_pressed_again_and_again_waits_for_every_shard(tmp_path, monkeypatch):
    """Three Ctrl-C while the shards tear down (the third while the "please wait" note
    prints): run() raises KeyboardInterrupt only once every shard has finished."""
    finished: list[str] = []
    running = threading.Barrier(3, timeout=120)  # both shards and the Ctrl-C presser
    torn_down = threading.Event()  # the shards' teardowns end after the last Ctrl-C

    def main(self: Shard) -> None:
        running.wait()  # inside run(): Ctrl-C is the sweep's by now
        assert self.sweep.abort.wait(120)
        assert torn_down.wait(120)  # tearing its testbed down
        finished.append(self.name)

    monkeypatch.setattr(Shard, "main", main)
    progress = FakeProgress(slow=True)
    sweep = make_sweep(tmp_path, progress)
    handled = [threading.Event() for _ in range(3)]  # the sweep's handler saw Ctrl-C n
    stop_all = sweep.stop_all

    def stop_all_counted() -> None:
        stop_all()
        next(e for e in handled if not e.is_set()).set()

    monkeypatch.setattr(sweep, "stop_all", stop_all_counted)
    problems: list[str] = []
    main_thread = threading.get_ident()  # runs the signal handlers and sweep.run

    def interrupt() -> None:
        try:
            running.wait()
            for n, done in enumerate(handled):
                if n == 2 and not progress.printing.wait(120):
                    problems.append("no note while the shards tear down")
                # a terminal's Ctrl-C reaches the main thread, which runs the handlers
                signal.pthread_kill(main_thread, signal.SIGINT)
                if n == 2:
                    # the note prints on: Python may run the handler only once the main
                    # thread is back from its wait (a CPU hog beside the test showed it:
                    # a note held until the handler ran waited its whole 120 s)
                    progress.printed.set()
                if not done.wait(120):
                    problems.append(f"Ctrl-C {n + 1} was not handled")
        finally:
            progress.printed.set()
            torn_down.set()

    previous = signal.getsignal(signal.SIGINT)
    sender = threading.Thread(target=interrupt)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sweep.run(sweep.config.cells())
        assert sorted(finished) == ["s0", "s1"]  # as run() left
        assert not any(sh.thread.is_alive() for sh in sweep.shards)
    finally:
        sender.join(30)
    assert problems == []
    assert signal.getsignal(signal.SIGINT) is previous  # restored


def test_the_gate_counts_the_testbeds_there_are(tmp_path, monkeypatch):
    monkeypatch.setattr(Shard, "main", lambda self: None)
    sweep = make_sweep(tmp_path, parallel=8)
    sweep.run(sweep.config.cells())  # two units: two shards, not eight
    assert len(sweep.shards) == 2
    assert sweep.gate is not None  # no testbed up: all of the budget is free
    assert sweep.gate.capacity == scheduler.estimate.budget(sweep.cores)


class FailingTestbed:
    """Registers its run, then fails while building it (and undoes itself, as Testbed
    does): state None afterwards, run_id unavailable."""

    def __init__(self, topology, backend, *, on_registered, **_options) -> None:
        self.topology = topology
        self.on_registered = on_registered
        self.downs = 0

    def create_hosts(self) -> None:
        self.on_registered("abc123")
        raise RuntimeError("the gateway did not boot")

    def down(self) -> None:  # Testbed.down of an undone run: nothing left
        self.downs += 1

    log_findings: list = []  # no node ever ran

    @property
    def run_id(self) -> str:
        raise AssertionError("run_id of a testbed that is not up")


def test_a_bring_up_that_fails_is_recorded_then_marked_down(tmp_path, monkeypatch):
    monkeypatch.setattr(scheduler, "Testbed", FailingTestbed)
    sweep = make_sweep(tmp_path)
    sweep.gate = plan.Gate(1.0)
    shard = Shard(sweep, "s0")
    with pytest.raises(RuntimeError, match="did not boot"):
        shard.up(3)
    assert calls(sweep) == [("started", "abc123")]  # before anything was built
    shard.down()  # what Shard.main's finally does
    assert calls(sweep) == [("started", "abc123"), ("down", "abc123")]
    assert shard.tb is None and shard.testbed_run is None


def test_a_teardown_that_fails_leaves_the_testbed_up_in_the_store(tmp_path):
    class Stuck:
        def down(self) -> None:
            raise RuntimeError("namespace busy")

    sweep = make_sweep(tmp_path)
    shard = Shard(sweep, "s0")
    shard.tb, shard.nodes, shard.testbed_run = cast(Any, Stuck()), 3, "abc123"
    with pytest.raises(RuntimeError, match="busy"):
        shard.down()
    assert calls(sweep) == []  # still "up": the next run removes what is left


def test_a_cluster_that_came_up_goes_down_with_its_teardown_and_its_logs_recorded(tmp_path):
    """After down() a testbed has no run id any more: what is recorded is keyed by the
    one the store knows it by; its nodes' log lines no allowance explains are warned of."""
    from testbed.cassandra.logscan import Finding

    class Up:
        log_findings = [
            Finding("e1", "ERROR [main] something broke", None),
            Finding("e0", "java.io.IOException: Connection reset by peer", "a peer killed"),
        ]

        def __init__(self) -> None:
            self.up = True

        def down(self) -> None:
            self.up = False

        @property
        def run_id(self) -> str:
            assert self.up, "run_id of a testbed that is not up"
            return "abc123"

    progress = FakeProgress()
    sweep = make_sweep(tmp_path, progress=progress)
    shard = Shard(sweep, "s0")
    shard.tb, shard.nodes, shard.testbed_run = cast(Any, Up()), 3, "abc123"
    shard.shaper = "host"
    shard.down()
    recorded = calls(sweep)
    assert ("down", "abc123") in recorded
    (teardown,) = [c[1]["teardowns"] for c in recorded if "teardowns" in c[1]]
    assert teardown["abc123"]["nodes"] == 3 and teardown["abc123"]["shaper"] == "host"
    (logs,) = [c[1]["node_logs"] for c in recorded if "node_logs" in c[1]]
    assert logs["abc123"]["unexpected"] == 1
    assert logs["abc123"]["allowed"] == {"a peer killed": 1}
    assert any("1 ERROR/exception lines" in n and "e1: ERROR [main]" in n for n in progress.notes)
