"""The parallel sweep's rules (pure): units, the planner, the machine gate, and the same
rules replayed in virtual time for --dry-run."""

import threading
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from common.errors import ConfigError
from experiments.plan import estimate, fidelity
from experiments.plan import shards as plan
from experiments.settings.cells import Cell
from experiments.settings.config import SweepConfig


@pytest.fixture
def costs():
    """The model's costs for one test (it sets them with ``estimate.use``), restored after."""
    before = estimate.COSTS
    yield
    estimate.use(before)


def unit(nodes, cost, demand=0.1, latency=50.0, phase=0):
    cell = Cell(nodes, 1, latency, 0.5, 1)
    return plan.Unit(nodes, cell.network, (cell,), cost, demand, phase)


def take(p: plan.Planner, current: int | None) -> plan.Unit:
    u = p.next(current)
    assert u is not None
    return u


def test_units_group_a_network_setting_and_come_longest_first():
    cells = [Cell(3, rf, lat, 0.5, 1) for lat in (0.0, 100.0) for rf in (3, 1, 2)]
    units = plan.units(
        cells,
        cost_s=lambda c: c.latency_ms + 1,
        check_s=lambda c: 10,
        demand=lambda c: 17 / (c.latency_ms + 5),
    )
    assert [u.cells[0].latency_ms for u in units] == [100.0, 0.0]
    assert [c.rf for c in units[0].cells] == [1, 2, 3]
    assert units[0].cost_s == 10 + 3 * 101 and units[1].demand == pytest.approx(17 / 5)


def test_planner_keeps_a_cluster_busy_then_moves_only_when_worth_a_bring_up():
    todo = [unit(5, 300), unit(5, 200), unit(3, 250), unit(3, 20)]
    p = plan.Planner(todo, bringup_s=lambda n: 30)
    first = take(p, None)  # the node count with the most work per testbed
    assert (first.nodes, first.cost_s) == (5, 300)
    second = take(p, None)  # 3 nodes: 270 s alone beats 200 s shared with the first
    assert (second.nodes, second.cost_s) == (3, 250)
    assert take(p, 5).cost_s == 200  # its own node count first, longest first
    assert take(p, 3).cost_s == 20
    # nothing of 3 nodes left; 5 nodes has nothing either: both shards are done
    assert p.next(3) is None and p.next(5) is None and p.left() == []


def test_planner_does_not_bring_up_a_cluster_for_little_work():
    p = plan.Planner([unit(3, 100), unit(3, 40)], bringup_s=lambda n: 30)
    assert take(p, None).cost_s == 100
    assert p.next(None) is None  # 40 s shared is less than two bring-ups' worth
    assert take(p, 3).cost_s == 40


def test_a_requeued_unit_goes_back_longest_first_and_a_dead_shard_is_released():
    """--workers: a dead worker's unit returns to the queue in order; its shard no longer
    counts as serving the node count, so another shard is sent there."""
    p = plan.Planner([unit(3, 100), unit(3, 40)], bringup_s=lambda n: 30)
    lost = take(p, None)
    assert p.next(None) is None  # 40 s left, shared with the first shard: not worth it
    p.requeue(lost)
    assert [u.cost_s for u in p.left()] == [100, 40] and p.remaining_s(3) == 140
    p.release(3)  # the first shard's worker died
    assert take(p, None).cost_s == 100  # the node count has nobody now: worth a bring-up
    last = p.take()  # the last shard left takes what remains, whatever it costs
    assert last is not None and last.cost_s == 40
    assert p.take() is None


def test_the_first_pass_is_handed_out_before_the_rest():
    """Units of phase 0 (the first-pass latencies) go first, across node counts, even
    when later units are longer; a shard with no first-pass unit worth a bring-up runs
    ahead on its own node count instead of stopping."""
    todo = [
        unit(5, 500, latency=90, phase=1),
        unit(5, 100, latency=100),
        unit(3, 400, latency=90, phase=1),
        unit(3, 80, latency=100),
        unit(3, 10, latency=0),
    ]
    p = plan.Planner(todo, bringup_s=lambda n: 30)
    a = take(p, None)
    assert (a.nodes, a.cost_s) == (5, 100)  # phase 0 first, though 5 nodes' 500 is longer
    b = take(p, None)
    assert (b.nodes, b.cost_s) == (3, 80)
    # a: its node count has only phase 1 left; phase 0 of 3 nodes (10 s) is not worth a
    # bring-up beside b, so a runs ahead on its own cluster
    assert take(p, 5).cost_s == 500
    assert take(p, 3).cost_s == 10  # b finishes the first pass
    assert take(p, 3).cost_s == 400
    assert p.next(3) is None and p.next(5) is None


def test_a_new_shard_takes_later_work_when_the_first_pass_is_not_worth_joining():
    """The first pass's last unit is another shard's; a new shard must not stop while
    hours of the second phase are left (it would leave the grid to one testbed)."""
    todo = [unit(5, 100, latency=100), unit(5, 90, latency=50)]
    todo += [unit(n, 5000, latency=lat, phase=1) for n in (3, 5) for lat in (10, 20)]
    p = plan.Planner(todo, bringup_s=lambda n: 120)
    assert take(p, None).cost_s == 100
    second = take(p, None)  # 90 s of phase 0 left, shared: not worth it; phase 1 is
    assert (second.nodes, second.phase) == (3, 1)
    third = take(p, None)  # a 5-node cluster for phase 1 finishes 5 nodes' first pass first
    assert (third.nodes, third.cost_s) == (5, 90)
    assert take(p, 5).phase == 1


def test_units_carry_the_phase_of_their_cells():
    config = SweepConfig(
        nodes=(3,), latency_ms=(0.0, 50.0, 100.0), loss_pct=(0.5,), first_pass=(0.0, 100.0)
    )
    units = estimate.units(config, config.cells())
    assert [(u.cells[0].latency_ms, u.phase) for u in units][:2] == [(100.0, 0), (0.0, 0)]
    assert [(u.cells[0].latency_ms, u.phase) for u in units][2] == (50.0, 1)
    plain = SweepConfig(nodes=(3,), latency_ms=(0.0, 50.0, 100.0), loss_pct=(0.5,))
    assert config.fingerprint() == plain.fingerprint()  # an order, not another measurement


def until(condition, what: str, timeout_s: float = 10.0) -> None:
    """Wait for ``condition()`` (state another thread changes), failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_gate_admits_by_demand_in_arrival_order_and_setup_apart():
    gate = plan.Gate(budget=1.0)
    log: list[str] = []
    seen: dict[str, tuple] = {}
    leave = threading.Event()  # every holder stays in until the last one has arrived

    def hold(name, kind, demand):
        with gate.hold(kind, demand):
            log.append(f"in:{name}")
            seen[name] = (gate.measuring, gate.setups, gate.measures)
            assert leave.wait(10)
            log.append(f"out:{name}")  # still holding: before the next can be admitted

    def arrived() -> int:  # admitted or waiting in the queue
        with gate._cond:
            return len(gate._queue) + sum(e.startswith("in:") for e in log)

    arrivals = [
        ("a", "measure", 0.6),
        ("b", "measure", 0.3),
        ("alone", "measure", plan.EXCLUSIVE),
        ("setup", "setup", 0.0),
        ("c", "measure", 0.2),
    ]
    threads = []
    for name, kind, demand in arrivals:  # arrival order as listed: each waits in turn
        threads.append(threading.Thread(target=hold, args=(name, kind, demand)))
        threads[-1].start()
        until(lambda: arrived() == len(threads), f"{name} did not reach the gate")
    leave.set()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)
    entered = [e[3:] for e in log if e.startswith("in:")]
    assert entered == ["a", "b", "alone", "setup", "c"]
    assert seen["b"] == (pytest.approx(0.9), 0, 2)  # a and b together: 0.9 <= 1.0
    assert seen["alone"] == (0.0, 0, 1)  # after both left
    assert seen["setup"] == (0.0, 1, 0)  # never beside a measurement
    assert seen["c"] == (pytest.approx(0.2), 0, 1)
    assert log.index("out:b") < log.index("in:alone") < log.index("out:alone")
    assert log.index("out:alone") < log.index("in:setup") < log.index("out:setup")
    assert log.index("out:setup") < log.index("in:c")


def test_gate_capacity_is_the_budget_less_the_idle_testbeds():
    gate = plan.Gate(budget=0.3)
    gate.add_testbed(0.1)
    gate.add_testbed(0.1)
    assert gate.capacity == pytest.approx(0.1)
    with gate.hold("measure", 0.15):  # does not fit beside two idle testbeds: alone
        assert gate.alone == 1
        gate.remove_testbed(0.1)  # a testbed goes down meanwhile
        assert gate.capacity == pytest.approx(0.2)
    assert gate.alone == 0 and gate.measures == 0  # released as what it was admitted as
    with gate.hold("measure", 0.15):
        assert gate.alone == 0 and gate.measuring == pytest.approx(0.15)


def test_gate_lets_a_stopping_sweep_leave_the_queue():
    gate = plan.Gate(budget=1.0)
    stop = threading.Event()
    errors = []
    with gate.hold("measure", plan.EXCLUSIVE):

        def wait():
            try:
                with gate.hold("measure", 0.1, stop=stop):
                    pass
            except plan.Stopped:
                errors.append("stopped")

        t = threading.Thread(target=wait)
        t.start()
        stop.set()
        t.join(5)
    assert errors == ["stopped"] and not gate._queue


def test_simulation_of_one_testbed_is_the_sequential_sum():
    todo = [unit(3, 100), unit(3, 50)]
    wall = plan.simulate(
        todo, 1, budget=1, idle_cores=lambda n: 0.0, bringup_s=lambda n: 20, prepare_s=lambda n: 5
    )
    assert wall == pytest.approx(20 + 5 + 150)
    # two testbeds: the bring-ups do not overlap a measurement, the units do
    todo = [unit(3, 100), unit(3, 90)]
    wall = plan.simulate(
        todo, 2, budget=1, idle_cores=lambda n: 0.0, bringup_s=lambda n: 20, prepare_s=lambda n: 5
    )
    assert wall == pytest.approx(20 + 5 + 5 + 100)  # both set-ups together, baselines apart
    # CPU-bound units run alone whatever P is
    todo = [unit(3, 100, demand=plan.EXCLUSIVE), unit(3, 90, demand=plan.EXCLUSIVE)]
    wall = plan.simulate(
        todo, 2, budget=1, idle_cores=lambda n: 0.0, bringup_s=lambda n: 20, prepare_s=lambda n: 5
    )
    assert wall == pytest.approx(20 + 5 + 5 + 190)


def test_simulation_of_machines_gives_each_its_own_gate():
    """--workers: CPU-bound units that run alone on one machine run side by side on two;
    set-ups on one machine do not wait for measurements on the other."""
    todo = [unit(3, 100, demand=plan.EXCLUSIVE), unit(3, 90, demand=plan.EXCLUSIVE)]
    kw = dict(budget=1, idle_cores=lambda n: 0.0, bringup_s=lambda n: 20, prepare_s=lambda n: 5)
    one_machine = plan.simulate(todo, 2, **kw)  # type: ignore[arg-type]
    two_machines = plan.simulate(todo, 2, machines=[1, 1], **kw)  # type: ignore[arg-type]
    assert one_machine == pytest.approx(20 + 5 + 5 + 190)
    assert two_machines == pytest.approx(20 + 5 + 100)


def test_dry_run_estimate_shrinks_with_parallel_testbeds():
    config = SweepConfig(nodes=(3,), latency_ms=(50.0, 100.0), loss_pct=(0.5, 7.5))
    cells = config.cells()
    one = estimate.wall_s(config, cells, 1, 2)
    assert one == pytest.approx(estimate.sweep_s(config, cells), rel=0.02)
    assert estimate.wall_s(config, cells, 2, 2) < 0.7 * one
    accepted = (4, "a machine whose benchmark accepted 4")
    p, why = estimate.auto_parallel(
        config, cells, cores=2, total_mb=24000, used_mb=1000, accepted=accepted
    )
    assert p >= 2 and "memory allows" in why
    p, why = estimate.auto_parallel(
        config, cells, cores=2, total_mb=4000, used_mb=2000, accepted=accepted
    )
    assert p == 1  # no memory for a second testbed


def test_auto_parallel_stays_within_what_the_fidelity_benchmark_accepted(costs, monkeypatch):
    config = SweepConfig(nodes=(3,), latency_ms=(20.0, 50.0, 100.0), loss_pct=(0.5, 7.5))
    cells = config.cells()
    kw: dict[str, Any] = {"cores": 2, "total_mb": 24000, "used_mb": 1000}
    estimate.use(estimate.defaults("host"))
    # no verdict of this machine: the development machine's, by the sweep's largest testbed
    p, why = estimate.auto_parallel(config, cells, **kw)
    assert p == 2 and "the development machine's verdict on 3-node grids" in why
    for nodes in (4, 5):
        bigger = replace(config, nodes=(3, nodes))
        p, why = estimate.auto_parallel(bigger, bigger.cells(), **kw)
        assert p == 1 and "on 5-node grids" in why
    six = replace(config, nodes=(6,))
    p, why = estimate.auto_parallel(six, six.cells(), **kw)
    assert p == estimate.COSTS.max_parallel and "verdict:" in why  # no grid that large
    p, why = estimate.auto_parallel(config, cells, **kw, accepted=(1, "here, today"))
    assert p == 1 and "fidelity accepts up to 1 (here, today)" in why
    # a larger budget (as the benchmark tries one) lets more testbeds help, up to the verdict
    monkeypatch.setenv("EDGETB_MAX_BUSY", "0.6")
    estimate.use(estimate.defaults("host"))
    assert estimate.budget(2) == pytest.approx(1.2)
    p, _ = estimate.auto_parallel(config, cells, **kw, accepted=(6, "here"))
    assert 2 < p <= 6
    monkeypatch.setenv("EDGETB_MAX_BUSY", "1.5")
    with pytest.raises(ConfigError, match="EDGETB_MAX_BUSY"):
        estimate.defaults("host")


def test_each_shaper_charges_its_own_idle_cost_and_memory(costs):
    config = SweepConfig(nodes=(5,))
    estimate.use(estimate.defaults("gateway"))
    gateway = estimate.idle_cores(5), estimate.testbed_mb(config, 5)
    estimate.use(estimate.defaults("host"))
    host = estimate.idle_cores(5), estimate.testbed_mb(config, 5)
    assert host[0] == pytest.approx(5 * estimate.COSTS.idle_cores_per_node)
    assert gateway[1] - host[1] == pytest.approx(260 - estimate.COSTS.shaper_mb)


def test_the_largest_accepted_p_is_below_the_first_rejection(tmp_path, monkeypatch):
    assert fidelity.largest_accepted({2: True, 4: True, 6: False, 8: True}) == 4
    assert fidelity.largest_accepted({2: False, 4: True}) == 1
    monkeypatch.setenv("EDGETB_HOME", str(tmp_path))
    assert fidelity.accepted("host", 2) is None  # never measured here
    assert fidelity.record("host", 2, {2: True, 4: True, 6: False}, "3 nodes", "r", tmp_path) == 4
    p, why = fidelity.accepted("host", 2)  # type: ignore[misc]
    assert p == 4 and "this machine" in why
    # every grid must accept a P; a grid measured again replaces its own verdicts
    assert fidelity.record("host", 2, {2: True, 4: False}, "5 nodes", "r", tmp_path) == 2
    assert fidelity.record("host", 2, {2: True, 4: True}, "5 nodes", "r", tmp_path) == 4
    assert fidelity.accepted("host", 4) is None  # measured with other cores
    assert fidelity.accepted("gateway", 2) is None
    # quiet nodes load the machine differently: their verdicts are their own
    assert fidelity.accepted("host", 2, "quiet") is None
    assert fidelity.record("host", 2, {2: True, 4: True, 6: True}, "5", "r", tmp_path, "quiet") == 6
    assert fidelity.accepted("host", 2, "quiet")[0] == 6  # type: ignore[index]
    assert fidelity.accepted("host", 2)[0] == 4  # type: ignore[index]
    # a sweep's largest testbed: only grids of as many nodes or more decide (more JVMs
    # load the machine more); a grid that does not say its nodes decides nothing
    assert fidelity.accepted("host", 2, nodes=3) is None
    assert fidelity.record("host", 2, {2: True, 4: False}, "n3", "r", tmp_path, max_nodes=3) == 2
    assert fidelity.accepted("host", 2, nodes=3)[0] == 2  # type: ignore[index]
    assert fidelity.accepted("host", 2, nodes=5) is None  # measured on 3 nodes only
    assert fidelity.record("host", 2, {2: False}, "n5", "r", tmp_path, max_nodes=5) == 1
    assert fidelity.accepted("host", 2, nodes=5)[0] == 1  # type: ignore[index]
    # the nearest grid from above decides: a 5-node grid's rejection says nothing of 3
    assert fidelity.accepted("host", 2, nodes=3)[0] == 2  # type: ignore[index]
    assert fidelity.accepted("host", 2, nodes=4)[0] == 1  # type: ignore[index]
    assert "1 grid(s) of 5 nodes" in fidelity.accepted("host", 2, nodes=4)[1]  # type: ignore[index]
    # two grids of the same size: both must accept
    assert fidelity.record("host", 2, {2: False}, "n3b", "r", tmp_path, max_nodes=3) == 1
    assert fidelity.accepted("host", 2, nodes=3)[0] == 1  # type: ignore[index]
    fidelity.path().write_text("{not json")
    assert fidelity.accepted("host", 2) is None  # damaged: as if never measured


def test_equivalence_is_a_bound_on_the_shift_not_a_test_for_any_shift():
    rng = np.random.default_rng(1)
    # 72 cells all 0.05 ms slower: a sign test rejects (72 of 72 slower), equivalence accepts
    small = list(0.05 + rng.normal(0, 0.02, 72))
    assert fidelity.equivalent(small)
    median, lo, hi = fidelity.shift(small)
    assert lo <= median <= hi and 0.03 < median < 0.07
    assert fidelity.shift(small) == (median, lo, hi)  # seeded
    # a shift of 0.4 ms, or a noisy one whose CI reaches past 0.25 ms, is not accepted
    assert not fidelity.equivalent(list(0.4 + rng.normal(0, 0.02, 72)))
    assert not fidelity.equivalent(list(rng.normal(0.1, 2.0, 12)))


def calibration_cells() -> tuple[list[dict], list[dict]]:
    """Cells of a sequential run shaped by the gateway (8 CPU-ms per write, 0.1 cores
    idle on 3 nodes) and one cell of a parallel run."""
    cells = []
    for i, rate in enumerate((2.0, 5.0, 10.0, 50.0, 100.0)):
        busy = 0.1 + 0.008 * rate
        cells.append(
            {"run_id": "one", "cell_id": f"c{i}", "nodes": 3, "writes": 100, "warmup": 0,
             "started": 0.0, "finished": 100 / rate, "cpu_util": busy / 2}
        )  # fmt: skip
    cells.append({**cells[0], "run_id": "par", "cpu_util": 0.9})
    gateway = {"clusters": {"abc123": {"shaper": "gateway"}}}
    manifests = [
        {"run_id": "one", "parallel": {"p": 1}, "baseline": {"3": {"median": 2.6}}, **gateway},
        {"run_id": "par", "parallel": {"p": 3}, **gateway},
    ]
    return cells, manifests


def test_costs_are_fitted_to_measured_cells_of_one_testbed(costs):
    """busy cores = idle + CPU per write x write rate: the fit recovers both, and the
    baseline medians give the write at 0 ms; cells of parallel runs are left out."""
    estimate.use(estimate.defaults("gateway"))
    cells, manifests = calibration_cells()
    fitted = estimate.calibrate(cells, manifests, cores=2, shaper="gateway")
    assert fitted is not None and "5 measured cells" in fitted.source
    assert fitted.cpu_ms_per_write == pytest.approx(8.0)
    assert fitted.base_write_ms == 2.6
    idle3 = 3 * fitted.idle_cores_per_node + fitted.idle_cores_shaper
    assert idle3 == pytest.approx(0.1, abs=1e-3)
    # nothing to fit
    assert estimate.calibrate(cells[:2], manifests[1:], cores=2, shaper="gateway") is None


def test_cells_of_another_shaper_are_not_fitted(costs):
    estimate.use(estimate.defaults("host"))
    cells, manifests = calibration_cells()
    assert estimate.calibrate(cells, manifests, cores=2, shaper="host") is None
