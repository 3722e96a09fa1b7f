"""The sweep on a real 3-node cluster with real shaping: the measured RTTs, coordinators
and replica sets must show what the topology implies; kill -9 + resume loses nothing.

Each test runs `python -m experiments.sweep` as a user would (its own cluster).
"""

import csv
import json
import os
import select
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from scipy.stats import binom, binomtest

from common.errors import ConfigError
from experiments.store.db import Store

from .conftest import assert_no_residue, rtt_tolerance_ms, sweep_failure

NODES = 3
LATENCY = 20.0
# How far the model's prediction may be from the measurement, in ms: half a round trip
# of 2L at the 20 ms cells (a round trip more or fewer moves every write by 2L). Not a
# share of the measurement: the prediction starts from the 0 ms cell's service time,
# measured minutes before the 20 ms cell, and CPU taken by other work on the machine in
# between (the VM tests beside this session, a CPU hog) moved it by 8 ms (10 %) in CI.
# The model's precision on a quiet machine (within 5 %) is the fidelity benchmark's
# figure (docs/measured.md), not this test's.
MODEL_TOLERANCE_MS = LATENCY
# A write that lost a packet waits for TCP's retransmission timer (>= 200 ms on Linux):
# far above any write that did not (<= ~4 round trips of 2L = 160 ms here).
RETRANSMITTED_MS = 2 * LATENCY * 2 + 150


# The small grid of this module's sweep (3 nodes, RF 1-3, 0 and 20 ms, 0.5 % loss).
GRID = [
    "--nodes", "3", "--rf", "1,2,3", "--latency", "0,20", "--loss", "0.5", "--writes", "50",
    "--warmup", "10", "--profile", "uniform", "--verify-probes", "100",
]  # fmt: skip


def sweep(*args, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "experiments.sweep", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


@pytest.fixture(scope="module")
def small_grid(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    proc = sweep(*GRID, "--out", str(out))
    assert proc.returncode == 0, sweep_failure(proc.stderr)
    store = Store(out, create=False)
    (run,) = store.runs()
    yield out, store, run, proc
    store.close()


def requests_of(store, run_id):
    by = defaultdict(list)
    for values in store.iter_request_rows(run_id):  # each cell's requests in send order
        r = dict(zip(Store.EXPORT_COLUMNS, values, strict=True))
        by[(r["rf"], r["latency_ms"])].append(
            {
                "coordinator": r["coordinator"],
                "replicas": r["replicas"].split(","),
                "cir": r["coordinator_is_replica"],
                "rtt_ms": r["rtt_ns"] / 1e6,
                "error": r["error"],
            }
        )
    return by


def test_every_cell_is_stored_whole(small_grid):
    out, store, run, proc = small_grid
    assert run.status == "complete"
    cells = store.cells(run.run_id)
    assert sorted(c["cell_id"] for c in cells) == sorted(
        f"n3-rf{rf}-l{lat}-p0.5-r1" for rf in (1, 2, 3) for lat in (0, 20)
    )
    for c in cells:
        assert len(store.rtts_ns(run.run_id, c["cell_id"])) == 50
    assert "results:" in proc.stdout and "mean ms" in proc.stdout  # the summary table
    assert "python -m" not in proc.stdout + proc.stderr  # hints name `edgetb ...` (issue 43)
    assert set(run.manifest["baseline"]) == {"3"}
    assert run.manifest["baseline"]["3"]["n"] == 200
    clusters = list(run.manifest["clusters"].values())
    assert clusters and all(c["nodes"] == 3 for c in clusters)
    for c in clusters:  # one per testbed the sweep used, each with its own subnet
        assert c["driver"]["connection_class"] and c["baseline"]["n"] == 200
        assert_no_residue(c["testbed_run"])
    assert len({c["subnet"] for c in clusters}) == len(clusters)
    assert {c["shard"] for c in cells} <= {c["shard"] for c in clusters}
    assert all(0 < c["cpu_util"] <= 1 for c in cells)


def test_shaping_was_measured_for_each_cell(small_grid):
    out, store, run, _ = small_grid
    for c in store.cells(run.run_id):
        measured = c["shaping"]["measured"]
        # the echoes lost, as the sweep counted them, against the round trip's rate
        # (0.5 % each way) computed here: 99.9 % of counts fall in this range
        round_trip = 100 * (1 - (1 - 0.005) ** 2)
        low, high = binom.interval(0.999, measured["probes"], round_trip / 100)
        lost = round(measured["loss_pct"] * measured["probes"] / 100)
        assert measured["probes"] >= 100 and low <= lost <= high, measured
        assert abs(measured["median_rtt_ms"] - 2 * c["latency_ms"]) <= rtt_tolerance_ms(
            2 * c["latency_ms"]
        )


def test_rtt_grows_by_2L_per_round_trip(small_grid):
    """uniform profile: endpoint<->coordinator is one 2L round trip; a write that needs a
    replica other than its coordinator adds one more (coordinator<->replica).

    Compared per class of write (local ack only / remote ack needed) with medians: two
    cores run three JVMs, the endpoint and the TCG gateway, so a few writes of 50 are
    delayed by CPU contention (GC, flushes); a mean moves with them, a median does not."""
    _, store, run, _ = small_grid
    by = requests_of(store, run.run_id)
    for rf in (1, 2, 3):
        acks = rf // 2 + 1  # LOCAL_QUORUM
        base = [r["rtt_ms"] for r in by[(rf, 0.0)] if r["rtt_ms"] < 150]
        shaped = [r for r in by[(rf, LATENCY)] if r["rtt_ms"] < RETRANSMITTED_MS]
        # Writes that hit a retransmission are rare at 0.5 % loss; they are excluded here
        # (their count is checked) because one 250 ms outlier moves a 50-write mean 5 ms.
        assert len(shaped) >= 40 and len(base) >= 40
        remote = [not (r["cir"] and acks == 1) for r in shaped]
        for needs_remote in (False, True):
            pairs = zip(shaped, remote, strict=True)
            cls = [r["rtt_ms"] for r, rem in pairs if rem == needs_remote]
            if len(cls) < 5:  # RF 2/3 always need a remote ack; RF 1 has both classes
                continue
            expected = 2 * LATENCY * (2 if needs_remote else 1)
            grown = statistics.median(cls) - statistics.median(base)
            assert grown == pytest.approx(expected, abs=0.12 * expected), (
                rf,
                needs_remote,
                grown,
                expected,
            )
        # Per request: one round trip (2L) without a remote ack, two with one.
        for r, needs_remote in zip(shaped, remote, strict=True):
            assert r["rtt_ms"] >= 2 * LATENCY * (2 if needs_remote else 1) - 1.0


def test_round_robin_coordinators_and_replica_fraction(small_grid):
    _, store, run, _ = small_grid
    by = requests_of(store, run.run_id)
    for rf in (1, 2, 3):
        both = by[(rf, 0.0)] + by[(rf, LATENCY)]
        for cell in (by[(rf, 0.0)], by[(rf, LATENCY)]):
            counts = Counter(r["coordinator"] for r in cell)
            # exact round robin over the three nodes: 50 writes -> 17/17/16
            assert set(counts) == {"e0", "e1", "e2"}
            assert max(counts.values()) - min(counts.values()) <= 1, counts
        assert all(len(r["replicas"]) == rf for r in both)
        fraction = sum(r["cir"] for r in both) / len(both)
        assert fraction == pytest.approx(rf / NODES, abs=0.15), (rf, fraction)


def model_json(out) -> dict:
    """`python -m analysis.model OUT --json` as a user runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "analysis.model", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_model_predicts_the_measured_cells(small_grid):
    """`python -m analysis.model` as a user runs it: the prediction at 20 ms (from the
    0 ms cells and the configured links, nothing fitted) agrees with the measurement.

    Tolerance: the median within half a round trip (``MODEL_TOLERANCE_MS``), half the
    error of a wrong round-trip count. Quiet runs agree within 5 % (docs/measured.md),
    but the prediction comes from the 0 ms cell, measured before the 20 ms one: what a
    loaded machine adds to the service time between the two is not the model's.
    The mean is checked in its two parts, as the model builds it: the writes no loss
    touched (their mean within the same bound), and how many waited for a retransmission, which
    must be a plausible draw from the predicted probability (binomial test, p >= 0.001).
    The mean itself is not: at 50 writes and 0.5 % loss, 3 writes instead of the
    expected 0.8 that waited for TCP's 250 ms timer (a 4 % chance per cell; CI met it)
    move it by 16 %, with the model right."""
    out, *_ = small_grid
    data = model_json(out)
    at_20 = [c for c in data["cells"] if c["latency_ms"] == LATENCY]
    assert sorted(c["rf"] for c in at_20) == [1, 2, 3]
    for c in at_20:
        error = c["measured_median_ms"] - c["predicted_median_ms"]
        assert abs(error) <= MODEL_TOLERANCE_MS, c
        hit_m, hit_p = c["measured_hit_fraction"], c["predicted_hit_fraction"]
        body_m = c["measured_body_ms"] / (1 - hit_m)  # the mean of the untouched writes
        body_p = c["predicted_body_ms"] / (1 - hit_p)
        assert abs(body_p - body_m) <= MODEL_TOLERANCE_MS, (body_p, body_m, c)
        hits = round(hit_m * c["n"])
        assert binomtest(hits, c["n"], hit_p).pvalue >= 0.001, (hits, hit_p, c)
    (group,) = data["groups"]
    assert (group["nodes"], group["cells"], group["profile"]) == (NODES, 3, "uniform")
    report = (out / "report.html").read_text()
    assert "Predicted vs measured RTT" in report and "predicted mean" in report
    assert "python -m" not in report  # its hints name `edgetb ...` (issue 43)


def test_export_to_csv(small_grid):
    out, store, run, _ = small_grid
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.store.export", str(out), "--format", "csv"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    with open(out / "export" / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 300
    assert {r["coordinator"] for r in rows} == {"e0", "e1", "e2"}


def test_rerun_of_a_complete_sweep_measures_nothing(small_grid):
    out, *_ = small_grid
    proc = sweep(*GRID, "--out", str(out), timeout=120)
    assert proc.returncode == 0 and "already complete" in proc.stdout


def wait_for_cells(proc, out, n: int, before: str, timeout_s: float = 300) -> None:
    """Until the sweep ``proc`` has stored ``n`` cells in ``out`` (the next under way)."""
    db = out / "results.sqlite"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if db.exists():
            try:
                with Store(out, read_only=True) as polled:
                    if polled.cell_count() >= n:
                        return
            except (ConfigError, sqlite3.OperationalError):
                pass  # the sweep is still creating the store
        assert proc.poll() is None, f"the sweep ended before {before}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {n} cells before {before}")


def test_sighup_then_kill_9_mid_cell_and_the_sweep_resumes_whole(tmp_path):
    """One sweep, stopped twice as sweeps are stopped in the field, resumed each time.

    1. A dropped SSH session: the terminal hangs up (every write to it fails from then
       on) and the sweep gets SIGHUP; it tears its cluster down itself and exits 130.
    2. Resumed, it is killed with kill -9 in the middle of a cell: its cluster is left
       running. Resumed again, it removes that cluster, keeps the stored cells as they
       were, measures the cut-off cell once, and completes with nothing duplicated."""
    args = [
        *("--nodes", "3", "--rf", "1,2", "--latency", "10,20", "--loss", "0.5"),
        *("--writes", "60", "--warmup", "0", "--profile", "uniform", "--verify-probes", "0"),
        *("--cluster-warmup", "100", "--out", str(tmp_path)),
    ]  # 4 cells: one or two stored before the hang-up, one more before the kill, one left
    argv = [sys.executable, "-m", "experiments.sweep", *args]
    leader, follower = os.openpty()
    proc = subprocess.Popen(
        argv,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=os.environ.copy(),
        start_new_session=True,
    )
    os.close(follower)
    hang_up = threading.Event()

    def terminal():  # reads what the sweep prints until the terminal "hangs up"
        while not hang_up.is_set():
            if select.select([leader], [], [], 0.2)[0]:
                try:
                    os.read(leader, 65536)
                except OSError:
                    break
        os.close(leader)

    reader = threading.Thread(target=terminal)
    reader.start()
    db = tmp_path / "results.sqlite"
    try:
        wait_for_cells(proc, tmp_path, 1, "the hang-up")
        hang_up.set()
        reader.join()
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=300) == 130
    finally:
        hang_up.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with sqlite3.connect(db) as conn:
        hung_up = [r[0] for r in conn.execute("SELECT testbed_run FROM testbeds")]
    assert hung_up
    for testbed_run in hung_up:  # torn down by the sweep itself, not by the resume
        assert_no_residue(testbed_run)
    with Store(tmp_path, create=False) as store:
        (run,) = store.runs()
        assert run.status != "complete" and store.testbeds_up() == []
        stored = store.cell_count()
    assert 1 <= stored <= 2

    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy()
    )
    try:
        wait_for_cells(proc, tmp_path, stored + 1, "it could be killed")
        time.sleep(0.5)  # into the next cell (a 10 ms one: 60 writes in ~2.4 s)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with Store(tmp_path, create=False) as store:
        first = {c["cell_id"]: c["started"] for c in store.cells(run.run_id)}
        (stale,) = store.testbeds_up()  # the killed sweep's cluster is still running
    assert stored < len(first) < 4

    resumed = sweep(*args)
    assert resumed.returncode == 0, sweep_failure(resumed.stderr)
    assert "resumed" in resumed.stderr and f"removing cluster {stale}" in resumed.stderr
    assert_no_residue(stale)
    with Store(tmp_path, create=False) as store:
        (again,) = store.runs()
        assert again.run_id == run.run_id and again.status == "complete"
        cells = {c["cell_id"]: c["started"] for c in store.cells(run.run_id)}
        assert len(cells) == 4
        for cell_id, started in first.items():  # completed cells kept as they were
            assert cells[cell_id] == started
        assert store.request_count() == 4 * 60  # the cut-off cell redone once, no duplicate
        assert store.testbeds_up() == []


def test_five_nodes_on_the_paper_profile_are_what_the_model_predicts(tmp_path):
    """The seed paper's own shape at its largest: 5 edge nodes on the paper's link profile
    (edge links of L with the loss, a fixed delay towards the endpoint), RF 3 at
    LOCAL_QUORUM. The 20 ms cell's median write is predicted from the 0 ms cell and the
    configured links, nothing fitted: within half a round trip (quiet runs: within 5 %)."""
    out = tmp_path / "results"
    proc = sweep(
        *("--nodes", "5", "--rf", "3", "--latency", "0,20", "--loss", "0.5"),
        *("--profile", "paper", "--writes", "60", "--warmup", "10"),
        *("--cluster-warmup", "100", "--verify-probes", "20", "--out", str(out)),
    )
    assert proc.returncode == 0, sweep_failure(proc.stderr)
    with Store(out, read_only=True) as store:
        (run,) = store.runs()
        cells = store.cells(run.run_id)
        assert {(c["nodes"], c["rf"], c["profile"]) for c in cells} == {(5, 3, "paper")}
        assert sorted(c["latency_ms"] for c in cells) == [0.0, 20.0]
        medians = {}
        for c in cells:
            rtts = store.rtts_ns(run.run_id, c["cell_id"])
            assert len(rtts) == 60
            # the model's convention: the inverted CDF's median (the lower middle value)
            medians[c["latency_ms"]] = statistics.median_low(rtts) / 1e6
        for cluster in run.manifest["clusters"].values():
            assert cluster["nodes"] == 5
            assert_no_residue(cluster["testbed_run"])
    (at_20,) = [c for c in model_json(out)["cells"] if c["latency_ms"] == 20]
    # the model's measured side is the store's own median (recomputed here from the
    # stored RTTs, not taken from the model's output), its error against that
    assert at_20["measured_median_ms"] == pytest.approx(medians[20.0], abs=1e-6), at_20
    error = medians[20.0] - at_20["predicted_median_ms"]
    assert at_20["rf"] == 3 and abs(error) <= MODEL_TOLERANCE_MS, at_20


def test_the_notebook_rebuilds_the_figures_from_this_store(small_grid, tmp_path, monkeypatch):
    """docs/analysis.ipynb (issue 43, item 4) executed on this real store as `jupyter
    execute` runs it (nbclient, the python3 kernel): no cell fails, it draws a panel per
    (nodes, loss), and every mean it drew is summary.csv's for that grid point."""
    import nbformat
    from nbclient import NotebookClient

    out, *_ = small_grid
    notebook = Path(__file__).resolve().parents[2] / "docs" / "analysis.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    monkeypatch.setenv("EDGETB_RESULTS", str(out))  # the kernel's environment is ours
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    printed = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    (line,) = [ln for ln in printed.splitlines() if ln.startswith("NOTEBOOK ")]
    drawn = json.loads(line.removeprefix("NOTEBOOK "))
    with open(out / "analysis" / "summary.csv") as f:
        summary = {
            f"{r['nodes']}|{float(r['loss_pct']):g}|{r['rf']}|{float(r['latency_ms']):g}": float(
                r["mean_ms"]
            )
            for r in csv.DictReader(f)
        }
    assert drawn["panels"] == len({k.rsplit("|", 2)[0] for k in summary})
    assert drawn["means"].keys() == summary.keys()
    for key, mean in summary.items():
        assert drawn["means"][key] == pytest.approx(mean, abs=0.002), key
