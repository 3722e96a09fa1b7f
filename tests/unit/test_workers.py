"""The Dask controller (``experiments.remote.controller.Remote``) on a real Dask scheduler with real
worker processes that run a fake unit task (``tests.support.fake_units``: it measures
nothing). Death by exit, by silence, a failing unit, every worker gone, and inventory
errors. The real thing over SSH, measuring, is test_8_workers."""

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from common.errors import ConfigError
from experiments.remote.controller import Remote
from experiments.remote.fleet import WorkerLost, load_workers
from experiments.run.progress import Progress
from experiments.settings.config import SweepConfig
from experiments.store.db import Store
from tests.support import fake_units

ROOT = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from distributed import Worker
    async def main():
        async with Worker(sys.argv[1], name=sys.argv[2], nthreads=2, resources={"testbed": 1},
                          dashboard=False) as w:
            await w.finished()
    asyncio.run(main())
    """
)


@pytest.fixture
def dask(tmp_path):
    """A real Dask scheduler (in this process) with a short worker-ttl, and a way to start
    real worker processes that run the fake units of ``tests.support.fake_units``."""
    import dask as dask_config
    from distributed import Client, LocalCluster

    procs = []
    with dask_config.config.set({"distributed.scheduler.worker-ttl": "10s"}):
        # a free port for the dashboard too: 8787 may be another session's
        cluster = LocalCluster(n_workers=0, host="127.0.0.1", scheduler_port=0,
                               dashboard_address="127.0.0.1:0")  # fmt: skip
        client = Client(cluster)

        def start(modes: dict[str, str]) -> dict[str, subprocess.Popen]:
            sessions = {}
            for name, mode in modes.items():
                env = dict(os.environ, FAKE_MODE=mode, PYTHONPATH=str(ROOT))
                sessions[name] = subprocess.Popen(
                    [sys.executable, "-c", WORKER, cluster.scheduler_address, name],
                    env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=open(tmp_path / f"{name}.log", "w"),  # noqa: SIM115
                )  # fmt: skip
                procs.append(sessions[name])
            client.wait_for_workers(len(modes), timeout=60)
            return sessions

        try:
            yield client, start
        finally:
            for p in procs:
                p.kill()
                p.wait()
            client.close()
            cluster.close()


def run(tmp_path, dask, modes, *, nodes=(2, 3)):
    client, start = dask
    config = SweepConfig(
        nodes=nodes, rf=(1, 2), latency_ms=(10.0, 20.0), loss_pct=(0.5,), out=str(tmp_path)
    )
    store = Store(tmp_path)
    store.begin_run("run1", "fp", "t", {}, {})
    stream = io.StringIO()
    remote = Remote(
        config,
        store,
        "run1",
        Progress(len(config.cells()), 0, lambda _s: 0.0, stream=stream),
        client,
        sessions=start(modes),
        task=fake_units.measure_unit,
    )
    error = None
    try:
        remote.run(config.cells())
    except WorkerLost as exc:
        error = exc
    return config, store, stream.getvalue(), error


def test_two_good_workers_share_the_grid_and_each_cell_is_stored_once(tmp_path, dask):
    config, store, log, error = run(tmp_path, dask, {"w1": "good", "w2": "good"})
    assert error is None, log
    cells = store.cells("run1")
    assert sorted(c["cell_id"] for c in cells) == sorted(c.cell_id for c in config.cells())
    assert {c["worker"] for c in cells} == {"w1", "w2"}  # one node count each
    assert all(c["run_id"] == "run1" for c in cells)  # the controller's run, not theirs
    assert store.request_count("run1") == 2 * len(cells)
    manifest = store.run("run1").manifest
    assert manifest["requeued"] == [] and manifest["duplicates"] == 0
    assert {manifest["workers"][w]["status"] for w in ("w1", "w2")} == {"complete"}
    assert {manifest["workers"][w]["p"] for w in ("w1", "w2")} == {1}


@pytest.mark.parametrize("mode", ["die", "hang"])
def test_a_dead_or_silent_workers_cells_go_to_the_other(tmp_path, dask, mode):
    """A worker that exits, or stops answering (removed by the scheduler's worker-ttl),
    in its second unit: that unit is re-queued and measured by the other worker."""
    config, store, log, error = run(tmp_path, dask, {"w1": mode, "w2": "good"})
    assert error is None, log
    cells = store.cells("run1")
    assert sorted(c["cell_id"] for c in cells) == sorted(c.cell_id for c in config.cells())
    assert [c["worker"] for c in cells].count("w1") == 2  # its first unit (2 RFs), then gone
    manifest = store.run("run1").manifest
    (requeued,) = manifest["requeued"]
    assert requeued["worker"] == "w1" and len(requeued["cells"]) == 2
    assert set(requeued["cells"]) <= {c["cell_id"] for c in cells if c["worker"] == "w2"}
    assert manifest["workers"]["w1"]["status"] == "lost"
    assert manifest["duplicates"] == 0
    assert "worker w1 lost" in log


def test_the_cells_a_unit_did_not_return_are_measured_again(tmp_path, dask):
    """A unit whose result lacks cells (cut short on its worker) does not pass for
    measured: the missing cells are re-queued, and the run completes with each once."""
    config, store, log, error = run(tmp_path, dask, {"w1": "short"}, nodes=(3,))
    assert error is None, log
    cells = store.cells("run1")
    assert sorted(c["cell_id"] for c in cells) == sorted(c.cell_id for c in config.cells())
    (requeued,) = store.run("run1").manifest["requeued"]
    assert len(requeued["cells"]) == 1 and requeued["why"] == "its unit ended before them"


def test_a_unit_that_fails_on_two_workers_stops_the_run(tmp_path, dask):
    """The 20 ms unit fails on the worker measuring it (that worker gets no more units):
    it is re-queued once, fails on the second worker too, and the run stops there."""
    _config, store, log, error = run(tmp_path, dask, {"w1": "fail", "w2": "fail"}, nodes=(3,))
    assert error is not None and "failed on two workers" in str(error), log
    assert all("-l20-" not in c["cell_id"] for c in store.cells("run1"))
    manifest = store.run("run1").manifest
    assert {manifest["workers"][w]["status"] for w in ("w1", "w2")} >= {"failed"}


def test_every_worker_gone_with_cells_left_is_an_error(tmp_path, dask):
    _config, store, log, error = run(tmp_path, dask, {"w1": "die"})
    assert error is not None and "every worker is gone" in str(error), log
    assert len(store.cells("run1")) == 2  # the unit it returned before it died is kept


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


@pytest.mark.parametrize(
    "name, values, message",
    [
        ("w1", "edgetb_worker_dir=/", "edgetb_worker_dir '/' is a system directory"),
        ("w1", "edgetb_worker_dir=/tmp", "edgetb_worker_dir '/tmp' is a system directory"),
        ("w1", "edgetb_worker_dir=/var/lib/", "'/var/lib/' is a system directory"),
        ("w1", "edgetb_worker_dir=/proc/1", "'/proc/1' is a system directory"),
        ("w1", "edgetb_worker_dir=/srv/../etc", "must be a plain path"),
        ("w1", "edgetb_worker_dir=/srv//w", "must be a plain path"),
        ("w1", "edgetb_worker_dir=/srv/w$(id)", "must be an absolute path of letters"),
        ("w1", "edgetb_worker_dir=/srv/w edgetb_home=/root", "edgetb_home '/root' is a system"),
        ("w1", "edgetb_worker_dir=/srv/w edgetb_python=py", "edgetb_python 'py' must be an"),
        ("../up", "edgetb_worker_dir=/srv/w", "worker name '../up' must be letters"),
        ("a..b", "edgetb_worker_dir=/srv/w", "worker name 'a..b' must be letters"),
        ("-w", "edgetb_worker_dir=/srv/w", "worker name '-w' must be letters"),
    ],
)
def test_worker_names_and_directories_are_names_and_paths_of_their_own(
    tmp_path, name, values, message
):
    """A name becomes paths of logs and Ansible directories under the results; a
    directory is made 0700 with home/ and src/ below it on the worker: neither may point
    anywhere else."""
    path = _inventory(
        tmp_path, f"{name} ansible_host=127.0.0.1 ansible_ssh_private_key_file={{key}} {values}\n"
    )
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_workers(path)


def _sweep_on_scheduler(port: int, out, timeout: float) -> subprocess.CompletedProcess:
    """A sweep told to measure on the (plain) Dask scheduler at 127.0.0.1:``port``."""
    return subprocess.run(
        [sys.executable, "-m", "experiments.sweep", "--nodes", "2", "--scheduler",
         f"tcp://127.0.0.1:{port}", "--insecure-scheduler", "--out", str(out)],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_a_scheduler_address_that_is_not_dask_is_named_before_a_run_opens(tmp_path):
    """An SSH or HTTP port given as --scheduler: Dask read its banner as a frame count
    and tried to allocate exabytes; the banner is now read first and named."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def banner() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
            conn.close()

    threading.Thread(target=banner, daemon=True).start()
    out = tmp_path / "results"
    try:
        sweep = _sweep_on_scheduler(port, out, timeout=60)
    finally:
        server.close()
    assert sweep.returncode == 2, sweep.stderr
    (line,) = sweep.stderr.strip().splitlines()
    assert line == (
        f"error: --scheduler tcp://127.0.0.1:{port}: not a Dask scheduler "
        f"(it says 'SSH-2.0-OpenSSH_9.2p1 Debian-2')"
    )
    assert not out.exists() or not any(out.iterdir())  # no run was opened


def test_a_scheduler_address_that_accepts_and_says_nothing_is_an_error_within_its_bound(
    tmp_path,
):
    """A server that accepts connections and never answers (a hung scheduler, a port
    forwarded to nothing): the sweep hung past 300 s with a run opened in its results;
    now one line after the 10 s connection bound, and nothing opened."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    held = []

    def accept_and_hold() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept_and_hold, daemon=True).start()
    out = tmp_path / "results"
    t0 = time.monotonic()
    try:
        sweep = _sweep_on_scheduler(port, out, timeout=120)
    finally:
        server.close()
        for conn in held:
            conn.close()
    took = time.monotonic() - t0
    assert sweep.returncode == 2, sweep.stderr
    (line,) = sweep.stderr.strip().splitlines()
    assert line == (
        f"error: --scheduler tcp://127.0.0.1:{port}: no Dask scheduler answered within "
        f"10 s (no answer)"
    )
    assert took < 90, took  # the bound, and the interpreter's start on a loaded machine
    assert not out.exists() or not any(out.iterdir())  # no run was opened


def test_a_worker_listens_on_the_address_the_controller_reaches_it_at(capsys):
    """Not on every interface (anyone reaching the worker could speak to it); where that
    address is not the machine's own (NAT, a forwarded port), every interface, said."""
    from experiments.remote.worker import listen_host

    assert listen_host("127.0.0.1", "w1") == "127.0.0.1"
    assert listen_host(None, "w1") is None
    assert listen_host("203.0.113.9", "w1") is None  # TEST-NET-3: no machine's own
    assert "203.0.113.9 is not an address of this machine" in capsys.readouterr().err
