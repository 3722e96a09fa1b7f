"""Faults during a measurement, for real: a sweep kills a node of a 3-node cluster at 30 %
of a cell's writes; at RF 3 (QUORUM: 2 of 3) the writes keep succeeding, errors
only while the driver has not yet seen the node go (counted), while at RF 1 the writes
whose only replica is the dead node fail. The node is started again after each cell and
the recovery timed. A partition made and healed through the shaper shows in the ping."""

import json
import re
import statistics
import subprocess
import sys
import time

import pytest

from emulation import api as emulation_api
from emulation import links, shapers
from experiments import RunOptions, SweepConfig, run_sweep
from experiments.run import nemesis
from experiments.settings import faults
from experiments.store.db import Store
from testbed import Testbed, Topology

from .conftest import assert_no_residue, rtt_tolerance_ms, sweep_failure

WRITES = 300
# writes that may fail after a kill -9: the one in flight and one per pooled connection
# to the dead node the driver may try before its close is seen
KILL_ERRORS_MAX = 3


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults") / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.sweep", "--nodes", "3", "--rf", "1,3",
         "--latency", "10", "--loss", "0", "--profile", "uniform", "--writes", str(WRITES),
         "--warmup", "20", "--cluster-warmup", "50", "--verify-probes", "0",
         "--cl", "QUORUM", "--fault", "kill:e1@30%", "--out", str(out)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, sweep_failure(proc.stderr)
    return out, proc.stderr


def _cell(out, rf):
    with Store(out, read_only=True) as store:
        (run,) = store.runs()
        (cell,) = [c for c in store.cells(run.run_id) if c["rf"] == rf]
        return cell, store.requests(run.run_id, cell["cell_id"]), run


def test_rf3_keeps_writing_while_a_node_is_dead(swept):
    out, _ = swept
    cell, reqs, _ = _cell(out, 3)
    assert cell["fault"] == "kill:e1@30%"
    events = cell["fault_log"]["events"]
    kill = next(e for e in events if e["step"] == "make")
    assert 0.3 * WRITES <= kill["writes_done"] <= 0.5 * WRITES, kill
    # the writes are sequential: a write was over before the kill when the next one had
    # started by then; the one in flight at the kill may fail as it likes
    reqs = sorted(reqs, key=lambda r: r["seq"])
    before = [
        r for r, nxt in zip(reqs, reqs[1:], strict=False) if nxt["t_start_ns"] < kill["at_ns"]
    ]
    after = [r for r in reqs if r["t_start_ns"] >= kill["at_ns"]]
    assert before and after and len(before) + len(after) == len(reqs) - 1
    assert all(r["error"] is None for r in before), [r for r in before if r["error"]][:3]
    errors = [r for r in after if r["error"] is not None]
    # every key is still written (2 of its 3 replicas live); the errors are the writes
    # sent to e1 as coordinator before the driver saw it go. Writes are sequential and a
    # dead JVM's sockets close at once, so the first write sent to e1 fails on a closed
    # connection and the driver marks it down: a few at most (seen: 1 of ~200), not the
    # 20 % this once allowed, whatever the machine's load (an event, not a time)
    assert len(errors) <= KILL_ERRORS_MAX, (len(errors), len(after), errors[:5])
    assert all(r["coordinator"] in ("e1", None) for r in errors), errors[:5]
    rec = cell["fault_log"]["recovery"]
    assert rec["restarted"] == ["e1"]
    assert 0 < rec["restart_s"] <= rec["all_up_s"] <= rec["hints_delivered_s"], rec
    assert rec["nodetool"]["status"]["e0"] == {"e0": "UN", "e1": "UN", "e2": "UN"}
    # the writes acknowledged while e1 was dead reached it (as hints) once it was back:
    # keys from the store, looked up in e1's own SSTables
    held = rec["writes_held"]["e1"]
    outage = [r for r in after if r["error"] is None]
    assert held["acknowledged"] == len(outage), (held, len(outage))
    assert held["checked"] == nemesis.HELD_SAMPLE and held["held"] == held["checked"], held
    # ... and every acknowledged write, read back by value from each replica alone: none
    # lost, e0 and e2 hold them all, e1 those of its outage (hints)
    _read_back_whole(cell, reqs, "e1", kill["at_ns"])


def _read_back_whole(cell, reqs, faulty: str, went_ns: int) -> None:
    """Every acknowledged write read back: none lost, every replica but ``faulty`` holds
    all of its writes; ``faulty`` may lack only writes acknowledged in the moment before
    it went (measured: the last 4 writes, 14-57 ms before a kill -9 at QUORUM, one of
    them coordinated by the killed node: the two other replicas' acks answered the
    client while its own apply was still queued, and no hint covers a write that was
    acknowledged), which the read at ALL returned from the others and repaired."""
    found = cell["readback"]
    acked = [r for r in reqs if r["error"] is None]
    assert found["acknowledged"] == len(acked) and not found["expected"], found
    assert (found["lost"], found["unknown"]) == (0, 0), found
    for node in ("e0", "e1", "e2"):
        held = sum(node in r["replicas"].split(",") for r in acked)
        got = found["replicas"][node]
        assert got["ok"] + got["missing"] + got["stale"] == held, (node, held, found)
        assert node == faulty or got["ok"] == held, (node, held, found)
    started = {r["key"]: r["t_start_ns"] for r in acked}
    repaired = found["repaired_keys"]
    assert (
        len(repaired)
        == found["all"]["read"]
        == found["replicas"][faulty]["missing"] + (found["replicas"][faulty]["stale"])
    ), found
    early = [k for k in repaired if started[k] < went_ns - 1_000_000_000]
    assert not early, (early, went_ns, found)  # held before the fault: must be there
    print(f"{cell['fault']}: {faulty} lacked {len(repaired)} of {len(acked)} acknowledged "
          "writes after the recovery, all from the moment it went; ALL repaired them")  # fmt: skip


def test_rf1_writes_whose_only_replica_is_dead_fail(swept):
    out, _ = swept
    cell, reqs, _ = _cell(out, 1)
    kill = next(e for e in cell["fault_log"]["events"] if e["step"] == "make")
    after = [r for r in reqs if r["t_start_ns"] >= kill["at_ns"] + 2e9]  # detected by then
    on_e1 = [r for r in after if r["replicas"] == "e1"]
    elsewhere = [r for r in after if r["replicas"] != "e1"]
    assert on_e1 and elsewhere
    assert all(r["error"] is not None for r in on_e1), [r for r in on_e1 if r["error"] is None][:3]
    assert sum(r["error"] is None for r in elsewhere) >= 0.9 * len(elsewhere)
    # writes whose only replica is e1 are acknowledged only in the instant between the
    # kill's timestamp and the JVM's death: the check counts those the store shows
    held = cell["fault_log"]["recovery"]["writes_held"]["e1"]
    late = [r for r in reqs if r["t_start_ns"] >= kill["at_ns"] and "e1" in r["replicas"]]
    assert held["acknowledged"] == sum(r["error"] is None for r in late)
    assert held["held"] == held["checked"], held
    # the read-back counts every acknowledged write, losses at RF 1 marked expected
    found = cell["readback"]
    assert found["acknowledged"] == sum(r["error"] is None for r in reqs), found
    assert found["expected"] and len(found["lost_keys"]) == found["lost"], found
    print(f"RF 1, e1 killed: {found['lost']} of {found['acknowledged']} acknowledged lost")


def test_the_analysis_shows_the_fault_and_the_recovery(swept):
    out, _ = swept
    proc = subprocess.run(
        [sys.executable, "-m", "analysis.plots", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, sweep_failure(proc.stderr)
    table = (out / "analysis" / "faults.txt").read_text()
    assert "kill:e1@30%" in table, table
    assert len(list((out / "analysis").glob("fault_*.svg"))) == 2
    # every figure the report links to is there under its own name (cell ids have dots)
    for name in json.loads((out / "analysis" / "figures.json").read_text())["figures"]:
        assert (out / "analysis" / f"{name}.png").is_file(), name
    report = (out / "report.html").read_text()
    assert "Faults: availability and recovery" in report
    # the fault cells are not points of the paper's RTT curves
    _, _, run = _cell(out, 1)
    with Store(out, read_only=True) as store:
        for c in store.cells(run.run_id):
            assert "-fkill_e1@30p-" in c["cell_id"]
    for cluster in run.manifest["clusters"].values():
        assert_no_residue(cluster["testbed_run"])


def _probe(tb: Testbed, src: str, dst: str, count: int) -> dict:
    """``count`` ICMP echoes from ``src`` to ``dst`` (emulation.probe, the project's own
    ping: the machine may have none): {"sent": n, "rtt_us": [answered ...]}."""
    proc = tb.exec(
        src,
        [tb.python, "-m", "emulation.probe", tb.address(dst), "--count", str(count),
         "--interval", "0.02", "--wait", "1"],
        timeout=60,
    )  # fmt: skip
    return json.loads(proc.stdout)


def _ping_loss(tb: Testbed, src: str, dst: str) -> int:
    """% of 20 echoes unanswered."""
    got = _probe(tb, src, dst, 20)
    return round(100 * (got["sent"] - len(got["rtt_us"])) / got["sent"])


def test_a_partition_made_and_healed_through_the_shaper():
    tb = Testbed(Topology(edge_nodes=3), cassandra=None)
    tb.up()
    run_id = tb.run_id
    try:
        base = links.uniform(tb.topology, 5, 0)
        emulation_api.set_links(tb, base)
        fault = faults.parse("partition:e0|e1,e2@0%-50%")
        assert fault is not None
        runner = nemesis.Runner(tb, fault, 100, base=base)
        runner.begin()  # 0 %: cut
        assert _ping_loss(tb, "e0", "e1") == 100
        assert _ping_loss(tb, "e1", "e2") == 0
        assert _ping_loss(tb, "ep", "e0") == 0  # the endpoint stays connected
        runner.progress(50)  # 50 %: healed
        assert _ping_loss(tb, "e0", "e1") == 0
        runner.finish()
        made, healed = (e for e in runner.events if e["step"] in ("make", "heal"))
        assert made["took_ms"] < 2000 and healed["took_ms"] < 2000, runner.events
        assert emulation_api.configured(tb) == base
    finally:
        tb.down()
    assert_no_residue(run_id)


def test_a_trace_of_three_steps_is_replayed_on_schedule(tmp_path):
    """Three steps at 0, 1.5 and 3 s through the shaper, timed by packets: iputils ping
    every 10 ms from e0 to e1 all along, each echo's send time its printed time less its
    round trip. Each step's change shows in the echoes (2 x 40 ms, then 2 x 5 ms) within
    what docs/faults.md claims of the schedule, and between when the replay says it
    started the change and when the shaper acknowledged it."""
    from emulation import trace as trace_mod

    path = tmp_path / "three.csv"
    path.write_text(
        "t_s,src,dst,delay_ms,jitter_ms,loss_pct,rate_mbit\n"
        "0,*,*,10,,,\n"
        "1.5,e0,e1,40,,,\n1.5,e1,e0,40,,,\n"
        "3,*,*,5,,,\n"
    )
    tb = Testbed(Topology(edge_nodes=2), cassandra=None)
    tb.up()
    run_id = tb.run_id
    try:
        base = links.uniform(tb.topology, 0, 0)
        emulation_api.set_links(tb, base)
        shaper = shapers.for_testbed(tb, shapers.emulation(tb).shaper or "auto")
        replay = trace_mod.Replay(trace_mod.load(str(path)), base, shaper.apply, shaper.close)
        e1 = tb.topology.host("e1").address
        argv = ["ping", "-n", "-D", "-i", f"{PING_EVERY_MS / 1000:g}", "-w", "5", e1]
        ping = tb.popen("e0", argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)  # echoes before the first step too
        replay.start()
        out, err = ping.communicate(timeout=30)
        got = replay.stop()
        assert got["applied"] == 3 and got["error"] is None, (got, ping.returncode, err)
    finally:
        tb.down()
    assert_no_residue(run_id)
    echoes = _echoes(out)
    assert len(echoes) > 300, out[-500:] + err  # 5 s of echoes every 10 ms or more
    t0_s = got["schedule"][0]["at_ns"] / 1e9 - got["schedule"][0]["started_s"]
    # each step after the first: from the echoes' round trips before to after
    for step, (old_ms, new_ms) in zip(got["schedule"][1:], [(20, 80), (80, 10)], strict=True):
        planned_s = t0_s + step["t_planned_s"]
        last_old, first_new = _change_in(echoes, planned_s, old_ms, new_ms)
        # the echoes agree with the replay's own record: none wholly of the new delay sent
        # before it started the change, none wholly of the old sent after its ack
        started_s, acked_s = t0_s + step["started_s"], t0_s + step["acked_s"]
        slack_s = ECHO_STAMP_SLACK_MS / 1000
        assert first_new >= started_s - slack_s, (first_new - started_s, step)
        assert last_old <= acked_s + slack_s, (last_old - acked_s, step)
        # and the change is on schedule as docs/faults.md says, to an echo's spacing; a
        # shorter delay shows wholly once the packets held at the longer one have left (a
        # link keeps FIFO order, docs/network.md): one old delay less the new one later
        spacing_ms = (first_new - max(s for s, _ in echoes if s < first_new)) * 1000
        drain_ms = max(0, old_ms - new_ms) / 2
        late_ms = (first_new - planned_s) * 1000
        print(f"step at {step['t_planned_s']:g} s: echoes changed between "
              f"{(last_old - planned_s) * 1000:+.1f} and {late_ms:+.1f} ms of its offset "
              f"(echoes {spacing_ms:.1f} ms apart, {drain_ms:g} ms to drain); the replay says "
              f"started {(step['started_s'] - step['t_planned_s']) * 1000:+.2f} ms, "
              f"acknowledged {step['late_ms']:+.2f} ms")  # fmt: skip
        assert -STEP_LATE_MAX_MS <= late_ms <= STEP_LATE_MAX_MS + drain_ms + spacing_ms, step
    middle = [rtt for sent, rtt in echoes if t0_s + 1.6 <= sent < t0_s + 2.9]
    assert 80 <= statistics.median(middle) <= 80 + rtt_tolerance_ms(80), middle
    last = [rtt for sent, rtt in echoes if sent >= t0_s + 3.1]
    assert 10 <= statistics.median(last) <= 10 + rtt_tolerance_ms(10), last


# the trace test's instrument: an echo every 10 ms (10-15 apart as sent here); the time
# ping prints is taken in user space after the kernel's receive stamp, later by the
# process's wake-up (a few ms at most on a busy machine)
PING_EVERY_MS = 10
ECHO_STAMP_SLACK_MS = 15
# docs/faults.md: "median 1.6 ms off schedule, at most 32.8 ms"
STEP_LATE_MAX_MS = 32.8


def _echoes(ping_output: str) -> list[tuple[float, float]]:
    """(send time in s since the epoch, round trip in ms) of each echo iputils ping -D
    printed: its printed time less its round trip."""
    return [
        (float(stamp) - float(rtt) / 1000, float(rtt))
        for stamp, rtt in re.findall(r"^\[([\d.]+)\] .* time=([\d.]+) ms", ping_output, re.M)
    ]


def _change_in(
    echoes: list[tuple[float, float]], planned_s: float, old_ms: float, new_ms: float
) -> tuple[float, float]:
    """Around ``planned_s`` (within 0.5 s), the send time of the last echo wholly of the
    old round trip and of the first wholly of the new one after it (an echo sent while one
    direction had changed and the other not is neither)."""

    def near(rtt: float, target: float) -> bool:
        return target - 1 <= rtt <= target + rtt_tolerance_ms(target)

    around = [(s, rtt) for s, rtt in echoes if abs(s - planned_s) < 0.5]
    new = [s for s, rtt in around if near(rtt, new_ms)]
    assert new, f"no echo of {new_ms} ms within 0.5 s of the step: {around}"
    old = [s for s, rtt in around if near(rtt, old_ms) and s < new[0]]
    assert old, f"no echo of {old_ms} ms before the step's first of {new_ms} ms: {around}"
    return old[-1], new[0]


def test_a_sweep_replays_a_trace_in_its_cells_and_reports_the_schedule(tmp_path, capsys):
    """The sweep path, through the Python entry point (``from experiments import
    run_sweep``, in this process): a 2-node cell with a 3-step trace stores its achieved
    schedule, the links are the cell's own again afterwards, and the report shows the
    table."""
    path = tmp_path / "steps.csv"
    path.write_text(
        "t_s,src,dst,delay_ms,jitter_ms,loss_pct,rate_mbit\n"
        "0,e0,*,30,,,\n0,*,e0,30,,,\n1,*,*,5,,,\n2,e1,*,20,2,,\n2,*,e1,20,2,,\n"
    )
    out = tmp_path / "results"
    config = SweepConfig.from_dict(
        {"nodes": [2], "rf": [2], "latency_ms": [10], "loss_pct": [0], "profile": "uniform",
         "writes": 150, "warmup": 10, "cluster_warmup": 30, "verify_probes": 0,
         "trace": str(path), "out": str(out)}
    )  # fmt: skip
    result = run_sweep(config, RunOptions(parallel=1))
    assert result.ok and result.status == "complete", sweep_failure(capsys.readouterr().err)
    with Store(out, read_only=True) as store:
        (run,) = store.runs()
        (cell,) = store.cells(run.run_id)
    assert result.run_id == run.run_id and result.out == out
    # a second call is the command rerun: nothing measured, the stored run named
    again = run_sweep(config)
    assert (again.status, again.run_id, again.exit_code) == ("already complete", run.run_id, 0)
    log = cell["trace_log"]
    assert cell["trace"] == str(path) and log["applied"] == 3 and log["error"] is None, log
    assert log["max_late_ms"] < 500, log["schedule"]  # in its slot: steps are 1 s apart
    assert [s["t_planned_s"] for s in log["schedule"]] == [0, 1, 2]
    plots = subprocess.run(
        [sys.executable, "-m", "analysis.plots", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert plots.returncode == 0, plots.stderr[-3000:]
    assert "Link traces: the schedule held" in (out / "report.html").read_text()
    for cluster in run.manifest["clusters"].values():
        assert_no_residue(cluster["testbed_run"])


# -- the other faults in a Cassandra sweep: pause, restart, partition, links ---------------

OTHER_WRITES = 250  # ~40 ms each: the cell runs well past the fault's end (3 s) and settling
OTHER_FAULTS = (
    "pause:e2@1s-7s",  # writes are sequential: each one e2 coordinates waits 2 s
    "restart:e1@1s",
    "partition:e0|e1,e2@1s-3s",
    "links:e0-e1,e0-e2:delay=100@1s-3s",
)
SETTLE_NS = 5_000_000_000  # after a heal: TCP's backed-off resends (0.2, 0.6, 1.4, 3 s)


@pytest.fixture(scope="module")
def other_faults(tmp_path_factory):
    """RF 3 of 3 nodes at QUORUM (2 acks), 10 ms links, a cell per fault, timed in
    seconds from the first measured write; a 2 s request timeout, so that a write stuck
    on a paused or cut-off coordinator costs 2 s."""
    out = tmp_path_factory.mktemp("other-faults") / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.sweep", "--nodes", "3", "--rf", "3",
         "--latency", "10", "--loss", "0", "--profile", "uniform",
         "--writes", str(OTHER_WRITES), "--warmup", "10", "--cluster-warmup", "30",
         "--verify-probes", "0", "--cl", "QUORUM", "--timeout", "2",
         "--fault", ",".join(OTHER_FAULTS), "--out", str(out)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, sweep_failure(proc.stderr)
    with Store(out, read_only=True) as store:
        (run,) = store.runs()
        cells = {
            c["fault"]: (c, store.requests(run.run_id, c["cell_id"]))
            for c in store.cells(run.run_id)
        }
    assert sorted(cells) == sorted(OTHER_FAULTS)
    for cluster in run.manifest["clusters"].values():
        assert_no_residue(cluster["testbed_run"])
    return cells


def _brief(reqs, since_ns: int) -> list[str]:
    """Failed writes as a failure message shows them whole (a store row's repr is cut
    off before its error): seq, coordinator, start and end relative to the fault (ms),
    the error."""
    return [
        f"#{r['seq']} {r['coordinator']} {(r['t_start_ns'] - since_ns) / 1e6:+.0f}"
        f"..{(r['t_start_ns'] + (r['rtt_ns'] or 0) - since_ns) / 1e6:+.0f} ms: {r['error']}"
        for r in reqs[:8]
    ]


def _window(cell) -> tuple[int, int, float]:
    """When the fault was in effect (wall clock, ns): made (once its change had landed),
    then healed or back; and how long making it took (ms)."""
    events = cell["fault_log"]["events"]
    made = next(e for e in events if e["step"] == "make")
    back = next((e for e in events if e["step"] in ("heal", "started")), None)
    assert back is not None, f"the fault was never undone (healed, or its node back): {events}"
    end = back["at_ns"] + int(back.get("ready_s", 0) * 1e9)
    return made["at_ns"] + int(made["took_ms"] * 1e6), end, made["took_ms"]


def _whole_again(cell) -> None:
    rec = cell["fault_log"]["recovery"]
    assert rec["nodetool"]["status"]["e0"] == {"e0": "UN", "e1": "UN", "e2": "UN"}, rec
    for text in rec["nodetool"]["listpendinghints"].values():  # no line per target host
        assert len([ln for ln in text.splitlines() if ln.strip()]) <= 1, rec


@pytest.mark.parametrize("fault, node", [(OTHER_FAULTS[0], "e2"), (OTHER_FAULTS[1], "e1")])
def test_a_paused_or_restarted_node_costs_only_its_own_writes_and_gets_the_rest(
    other_faults, fault, node
):
    """The node stalls (SIGSTOP/SIGCONT) or restarts (SIGTERM, started again): writes it
    coordinated in the meantime may fail (timed out, or cut off as it stopped); every
    other write succeeds, 2 of 3 replicas being there; once back, it holds the writes
    acknowledged without it (looked up in its own SSTables)."""
    cell, reqs = other_faults[fault]
    made, back, _ = _window(cell)
    assert made < back
    failed = [r for r in reqs if r["error"] is not None]
    assert all(r["coordinator"] in (node, None) for r in failed), _brief(failed, made)
    during = [r for r in reqs if made <= r["t_start_ns"] < back]
    assert during and sum(r["error"] is None for r in during) >= len(during) / 2, during
    if fault.startswith("pause"):
        # a stalled coordinator cannot answer: with a 2 s timeout and a 6 s stall, the
        # first write sent to it times out (the writes are sequential), and every write
        # that failed was sent at most one timeout before the stall, or during it
        assert failed, f"no write failed while {node} was stalled"
        assert all(made - 2_000_000_000 <= r["t_start_ns"] < back for r in failed), _brief(
            failed, made
        )
    else:
        # while the node was down (its JVM gone, until 2 s before the start saw it serve
        # CQL again: the driver may reconnect a moment before) it coordinated nothing:
        # the driver saw it go and sent the writes elsewhere
        events = cell["fault_log"]["events"]
        start = next((e for e in events if e["step"] == "started"), None)
        assert start and start.get("stopped_s") is not None, f"{node} was not restarted: {events}"
        assert start.get("ready_s") is not None and "error" not in start, start
        down_from = start["at_ns"] + int(start["stopped_s"] * 1e9)
        down = [r for r in reqs if down_from <= r["t_start_ns"] and
                r["t_start_ns"] + r["rtt_ns"] <= back - 2_000_000_000]  # fmt: skip
        assert down and not [r for r in down if r["coordinator"] == node], down[:5]
    _whole_again(cell)
    held = cell["fault_log"]["recovery"]["writes_held"][node]
    assert held["acknowledged"] > 0 and held["checked"] > 0, held
    assert held["held"] == held["checked"], held
    _read_back_whole(cell, reqs, node, made)


def test_a_partition_fails_only_the_cut_off_coordinators_writes_until_healed(other_faults):
    """e0 cut off from e1 and e2 (the endpoint still reaches all three): a write e0
    coordinates cannot get its second ack and times out; e1 and e2 still make QUORUM
    together. Healed (and TCP's backed-off resends through), every write succeeds again."""
    cell, reqs = other_faults[OTHER_FAULTS[2]]
    made, healed, took_ms = _window(cell)
    failed = [r for r in reqs if r["error"] is not None]
    assert failed, "no write failed while e0 was cut off"
    assert all(r["coordinator"] == "e0" for r in failed), _brief(failed, made)
    cut = made - int(took_ms * 1e6) - 2_000_000_000  # a write may be stuck from just before
    assert all(cut <= r["t_start_ns"] < healed + SETTLE_NS for r in failed), _brief(failed, made)
    late = [r for r in reqs if r["t_start_ns"] >= healed + SETTLE_NS]
    assert late and all(r["error"] is None for r in late), late[:5]
    _whole_again(cell)


def test_slow_links_slow_only_the_writes_that_cross_them(other_faults):
    """e0's links to e1 and e2 at 100 ms for 2 s: a write e0 coordinates waits for a
    remote ack across one (>= 2 x 100 ms on top of the endpoint's 2 x 10 ms); writes
    coordinated by e1 or e2 get their second ack from each other over 10 ms links."""
    cell, reqs = other_faults[OTHER_FAULTS[3]]
    made, healed, _ = _window(cell)
    assert all(r["error"] is None for r in reqs)
    # started once the change had landed, finished before it was undone
    inside = [r for r in reqs if made <= r["t_start_ns"] and
              r["t_start_ns"] + r["rtt_ns"] <= healed]  # fmt: skip
    slow = [r["rtt_ns"] / 1e6 for r in inside if r["coordinator"] == "e0"]
    fast = [r["rtt_ns"] / 1e6 for r in inside if r["coordinator"] != "e0"]
    assert slow and fast, (len(slow), len(fast))
    assert min(slow) >= 2 * 100 + 2 * 10 - rtt_tolerance_ms(220), slow
    assert statistics.median(fast) < 100, fast
    outside = [r["rtt_ns"] / 1e6 for r in reqs if r["t_start_ns"] >= healed + 1e9]
    assert outside and statistics.median(outside) < 100, outside
    _whole_again(cell)
