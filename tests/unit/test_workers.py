"""The --workers controller (``experiments.workers.Dispatcher``) against fake workers:
real processes on real pipes that speak ``experiments.worker``'s protocol but measure
nothing (a cell is two made-up requests). Death by exit, by silence, a failing unit, a
poison unit, and inventory errors. The real thing over SSH is test_8_workers."""

import io
import json
import sys
import textwrap
from pathlib import Path

import pytest

from experiments.config import SweepConfig
from experiments.progress import Progress
from experiments.store import Store
from experiments.workers import Dispatcher, WorkerLost, load_workers
from testbed.errors import ConfigError

FAKE_WORKER = textwrap.dedent(
    """
    import json, os, sys, threading, time
    mode = sys.argv[1]
    lock, hung = threading.Lock(), threading.Event()
    def send(kind, **data):
        with lock:
            sys.stdout.write(json.dumps({"kind": kind, **data}) + "\\n"); sys.stdout.flush()
    def alive():  # as the real worker's heartbeat; a stopped (hung) process sends none
        while not hung.wait(0.3):
            send("alive", cpu=0.1)
    threading.Thread(target=alive, daemon=True).start()
    def recv():
        line = sys.stdin.readline()
        return json.loads(line) if line else None
    send("hello", pid=os.getpid(), hostname="fake", clock=time.time())
    begin = recv()
    send("started", p=1, why="fake")
    stored = 0
    ident = 0
    nodes = None
    while True:
        ident += 1
        send("want", id=ident, shard="s0", nodes=nodes)
        m = recv()
        while m is not None and m.get("id") != ident:
            m = recv()
        if m is None:
            sys.exit(130)
        if m["kind"] == "none":
            break
        if mode == "fail" and "-l20-" in m["cells"][0]:
            send("done", status="failed", error="Cassandra died")
            sys.exit(1)
        nodes = int(m["cells"][0][1])
        for cell_id in m["cells"]:
            if mode == "hang" and stored == 1:
                hung.set()
                time.sleep(3600)
            if mode == "die" and stored == 1:
                os._exit(9)
            cell = {"run_id": "theirs", "cell_id": cell_id, "nodes": int(cell_id[1]),
                    "rf": int(cell_id.split("-rf")[1][0]), "cl": "ONE", "policy": "rr",
                    "profile": "uniform", "latency_ms": 1.0, "loss_pct": 0.5,
                    "repetition": 1, "writes": 2, "warmup": 0, "key_seed": "1",
                    "shaping": {}, "testbed_run": "abcdef", "started": 1.0,
                    "finished": 2.0, "shard": "s0", "cpu_util": 0.1}
            reqs = [{"run_id": "theirs", "cell_id": cell_id, "seq": i, "key": "k",
                     "coordinator": "e0", "replicas": "e0", "coordinator_is_replica": 1,
                     "rtt_ns": 1000 + i, "error": None, "t_start_ns": i} for i in range(2)]
            send("cell", cell=cell, requests=reqs)
            stored += 1
            time.sleep(0.05)
    send("done", status="complete", error=None)
    """
)


class FakeFleet:
    """Sessions are local fake workers; ``command`` (the dead worker's clean) recorded."""

    def __init__(self, tmp_path: Path, modes: dict[str, str]):
        self.script = tmp_path / "fake_worker.py"
        self.script.write_text(FAKE_WORKER)
        self.modes = modes
        self.specs = {name: type("Spec", (), {"py": "py", "dir": f"/w/{name}"}) for name in modes}
        self.commands: list[tuple[str, list[str]]] = []

    def session_argv(self, name: str) -> list[str]:
        return [sys.executable, str(self.script), self.modes[name]]

    def command(self, name: str, argv: list[str]) -> tuple[bool, str]:
        self.commands.append((name, argv))
        return True, "removed"


def run(tmp_path, modes, *, timeout_s=60.0, nodes=(2, 3)):
    config = SweepConfig(
        nodes=nodes, rf=(1, 2), latency_ms=(10.0, 20.0), loss_pct=(0.5,), out=str(tmp_path)
    )
    store = Store(tmp_path)
    store.begin_run("run1", "fp", "t", {}, {})
    stream = io.StringIO()
    fleet = FakeFleet(tmp_path, modes)
    dispatcher = Dispatcher(
        config,
        store,
        "run1",
        Progress(len(config.cells()), 0, lambda _s: 0.0, stream=stream),
        fleet,  # type: ignore[arg-type]
        list(modes),
        timeout_s=timeout_s,
    )
    error = None
    try:
        dispatcher.run(config.cells())
    except WorkerLost as exc:
        error = exc
    return config, store, fleet, stream.getvalue(), error


def test_two_good_workers_share_the_grid_and_each_cell_is_stored_once(tmp_path):
    config, store, fleet, log, error = run(tmp_path, {"w1": "good", "w2": "good"})
    assert error is None, log
    cells = store.cells("run1")
    assert sorted(c["cell_id"] for c in cells) == sorted(c.cell_id for c in config.cells())
    assert {c["worker"] for c in cells} == {"w1", "w2"}  # one node count each
    assert all(c["run_id"] == "run1" for c in cells)  # the controller's run, not theirs
    assert store.request_count("run1") == 2 * len(cells)
    manifest = store.run("run1").manifest
    assert manifest["requeued"] == [] and manifest["duplicates"] == 0
    assert {manifest["workers"][w]["status"] for w in ("w1", "w2")} == {"complete"}
    assert fleet.commands == []


@pytest.mark.parametrize("mode, timeout_s", [("die", 60.0), ("hang", 1.5)])
def test_a_dead_or_silent_workers_leased_cells_go_to_the_other(tmp_path, mode, timeout_s):
    config, store, fleet, log, error = run(
        tmp_path, {"w1": mode, "w2": "good"}, timeout_s=timeout_s
    )
    assert error is None, log
    cells = store.cells("run1")
    assert sorted(c["cell_id"] for c in cells) == sorted(c.cell_id for c in config.cells())
    assert [c["worker"] for c in cells].count("w1") == 1  # it stored one, then died
    manifest = store.run("run1").manifest
    (requeued,) = manifest["requeued"]
    assert requeued["worker"] == "w1" and len(requeued["cells"]) == 1
    assert manifest["workers"]["w1"]["status"] == "lost"
    assert manifest["workers"]["w1"]["cleaned"] == {"ok": True, "output": "removed"}
    assert [name for name, _ in fleet.commands] == ["w1"]
    assert fleet.commands[0][1][-3:] == ["clean", "--root", "/w/w1"]
    if mode == "hang":
        assert "silent for" in log


def test_a_unit_that_fails_on_two_workers_stops_the_run(tmp_path):
    """The 20 ms unit kills the worker measuring it (a worker that fails stops): it is
    re-queued once, fails on the second worker too, and the run stops there."""
    _config, store, fleet, log, error = run(tmp_path, {"w1": "fail", "w2": "fail"}, nodes=(3,))
    assert error is not None and "failed on two workers" in str(error), log
    assert all("-l20-" not in c["cell_id"] for c in store.cells("run1"))
    assert sorted(name for name, _ in fleet.commands) == ["w1", "w2"]


def test_every_worker_gone_with_cells_left_is_an_error(tmp_path):
    _config, store, _fleet, log, error = run(tmp_path, {"w1": "die"})
    assert error is not None and "every worker is gone" in str(error), log
    assert len(store.cells("run1")) == 1  # what it sent before it died is kept


def _inventory(tmp_path, body):
    key = tmp_path / "key"
    key.write_text("x")
    path = tmp_path / "inv.ini"
    path.write_text(body.format(key=key))
    return path


def test_inventory_problems_are_named_in_one_line(tmp_path):
    path = _inventory(
        tmp_path,
        "w1 ansible_host=127.0.0.1 ansible_ssh_private_key_file={key} edgetb_worker_dir=rel\n"
        "w2 ansible_host=127.0.0.1 ansible_ssh_private_key_file={key} edgetb_worker_dir=/w "
        "edgetb_subnet_pool=10.1.2.3/33 edgetb_parallel=many\n"
        "w3 ansible_host=127.0.0.1 ansible_ssh_private_key_file={key} edgetb_worker_dir=/w\n",
    )
    with pytest.raises(ConfigError) as info:
        load_workers(path)
    text = str(info.value)
    assert "\n" not in text
    for part in (
        "w1: edgetb_worker_dir must be an absolute path",
        "w2: edgetb_subnet_pool '10.1.2.3/33' is not an IPv4 network",
        "w2: edgetb_parallel 'many' is not auto or 1..16",
        "w3: another worker uses /w on the same machine",
    ):
        assert part in text, text


def test_a_good_inventory_gives_each_worker_its_home_and_pool(tmp_path):
    path = _inventory(
        tmp_path,
        "[workers]\nw1 edgetb_worker_dir=/srv/w1 edgetb_subnet_pool=10.91.0.0/16\n"
        "w2 edgetb_worker_dir=/srv/w2/ edgetb_python=/opt/py/bin/python\n"
        "[workers:vars]\nansible_host=127.0.0.1\nansible_port=2222\n"
        "ansible_ssh_private_key_file={key}\n",
    )
    w1, w2 = load_workers(path)
    assert (w1.host.port, w1.dir, w1.home, w1.py) == (
        2222,
        "/srv/w1",
        "/srv/w1/home",
        "/srv/w1/venv/bin/python",
    )
    assert w1.env() == [
        "EDGETB_HOME=/srv/w1/home",
        "PYTHONPATH=/srv/w1/src",
        "EDGETB_SUBNET_POOL=10.91.0.0/16",
    ]
    assert (w2.dir, w2.py, w2.subnet_pool) == ("/srv/w2", "/opt/py/bin/python", None)
    assert json.dumps(w2.parallel) == '"auto"'
