"""This machine's calibration (experiments.plan.calibration): what a run measured here is kept
in $EDGETB_HOME and used by the next dry run of any results directory."""

import json

import pytest

from experiments.plan import calibration, estimate
from experiments.run import launch
from experiments.settings.config import SweepConfig


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETB_HOME", str(tmp_path / "home"))
    before = estimate.COSTS
    yield tmp_path / "home"
    estimate.use(before)


def manifest(bringups: dict[str, tuple[int, float]], teardowns=None, shaper="host") -> dict:
    return {
        "clusters": {
            k: {"nodes": n, "shaper": shaper, "bringup_s": s} for k, (n, s) in bringups.items()
        },
        "teardowns": {
            k: {"nodes": n, "shaper": shaper, "teardown_s": s}
            for k, (n, s) in (teardowns or {}).items()
        },
    }  # fmt: skip


def stored(shaper: str, build: str = "quiet") -> dict:  # the default build
    found = calibration.entry(shaper, build, 2)
    assert found is not None
    return found


def rows(config: SweepConfig, factor: float) -> list[dict]:
    """Stored cells of ``config`` that took ``factor`` times what the model says."""
    out, t = [], 1000.0
    for cell in config.cells():
        took = estimate.cell_s(config, cell) / estimate.COSTS.cell_scale * factor
        out.append({"cell_id": cell.cell_id, "started": t, "finished": t + took})
        t += took
    return out


def test_a_run_teaches_bringups_teardowns_and_how_cells_compare_with_the_model(home):
    config = SweepConfig(nodes=(3,), latency_ms=(0.0, 20.0), loss_pct=(0.5, 2.5))
    estimate.use(estimate.defaults("host"))
    modelled = estimate.sweep_s(config)
    m = manifest({"a": (3, 30.0), "b": (5, 50.0)}, {"a": (3, 4.0)})
    calibration.learn(config, "host", 2, m, rows(config, 1.5), fitted=None)
    found = calibration.entry("host", "quiet", 2)
    assert found is not None
    assert found["bringup_s"] == {"3": [30.0], "5": [50.0]}
    assert found["cell_scale"] == pytest.approx(1.5, abs=1e-3) and found["scale_cells"] == len(
        config.cells()
    )
    estimate.use(calibration.apply(estimate.defaults("host"), found))
    assert "this machine's calibration" in estimate.COSTS.source
    assert estimate.bringup_s(3) == pytest.approx(34.0)  # measured up + teardown
    assert estimate.bringup_s(4) == pytest.approx(44.0)  # between the two measured
    assert estimate.bringup_s(7) == pytest.approx(74.0)  # along their line
    cell = config.cells()[0]
    estimate.use(estimate.defaults("host"))
    plain = estimate.cell_s(config, cell)
    estimate.use(calibration.apply(estimate.defaults("host"), found))
    assert estimate.cell_s(config, cell) == pytest.approx(1.5 * plain)
    assert estimate.sweep_s(config) > 1.4 * modelled
    # learning again from a calibrated model converges (the scale is not compounded)
    calibration.learn(config, "host", 2, {}, rows(config, 1.5), fitted=None)
    assert stored("host")["cell_scale"] == pytest.approx(1.5, abs=1e-3)


def test_samples_are_kept_per_shaper_build_and_cores_and_a_median_is_used(home):
    config = SweepConfig(nodes=(3,))
    for i, s in enumerate((20.0, 40.0, 22.0)):
        calibration.learn(config, "host", 2, manifest({f"c{i}": (3, s)}), [], fitted=None)
    found = calibration.entry("host", "quiet", 2)
    assert found is not None and found["bringup_s"]["3"] == [20.0, 40.0, 22.0]
    assert "cell_scale" not in found  # no cells of one testbed: no scale
    estimate.use(calibration.apply(estimate.defaults("host"), found))
    assert estimate.bringup_s(3) == pytest.approx(22.0 + 2.0)  # median; default teardown
    # another build, another shaper's clusters, another machine's cores: nothing of this
    assert calibration.entry("host", "stock", 2) is None
    assert calibration.entry("host", "quiet", 4) is None
    calibration.learn(config, "gateway", 2, manifest({"g": (3, 99.0)}, shaper="gateway"), [], None)
    assert stored("gateway")["bringup_s"]["3"] == [99.0]
    assert stored("host")["bringup_s"]["3"] == [20.0, 40.0, 22.0]
    for i in range(calibration.SAMPLES + 3):
        calibration.learn(config, "host", 2, manifest({f"d{i}": (3, 30.0 + i)}), [], fitted=None)
    kept = stored("host")["bringup_s"]["3"]
    assert len(kept) == calibration.SAMPLES and kept[-1] == 30.0 + calibration.SAMPLES + 2


def test_a_damaged_or_hostile_file_is_as_if_nothing_was_measured(home):
    home.mkdir(parents=True)
    path = calibration.path()
    for text in ("{", "[]", json.dumps({"version": 99, "entries": {}})):
        path.write_text(text)
        assert calibration.entry("host", "quiet", 2) is None
    bad = {"cores": 2, "bringup_s": {"3": ["x", -1, 1e9], "z": [5]}, "cell_scale": 40.0}
    path.write_text(json.dumps({"version": 1, "entries": {"host": bad}}))
    found = calibration.entry("host", "stock", 2)
    defaults = estimate.defaults("host")
    assert calibration.apply(defaults, found) == defaults  # nothing usable in it
    # the next run's learning replaces it; a name planted there is replaced, not followed
    target = home / "elsewhere"
    target.write_text("theirs")
    path.unlink()
    path.symlink_to(target)
    calibration.learn(SweepConfig(nodes=(3,)), "host", 2, manifest({"a": (3, 9.0)}), [], None)
    assert target.read_text() == "theirs" and not path.is_symlink()
    assert stored("host")["bringup_s"] == {"3": [9.0]}


def test_a_new_results_directory_is_estimated_with_this_machines_calibration(home, tmp_path):
    """The dry run of a directory with no cells uses what runs measured here before;
    VM and real-host backends keep the model's own figures."""
    config = SweepConfig(nodes=(5,), latency_ms=(0.0,), out=str(tmp_path / "new"))
    launch.calibrate_from(config)
    before, up_before = estimate.sweep_s(config), estimate.bringup_s(5)
    assert "development machine" in estimate.COSTS.source
    shaper = launch.costs_shaper(config)
    measured = manifest({"a": (5, 120.0)}, shaper=shaper)
    calibration.learn(config, shaper, launch.CORES, measured, [], None)
    launch.calibrate_from(config)
    assert "this machine's calibration" in estimate.COSTS.source
    assert estimate.bringup_s(5) == pytest.approx(120.0 + estimate.COSTS.teardown_s)
    assert estimate.sweep_s(config) - before == pytest.approx(estimate.bringup_s(5) - up_before)
    vms = SweepConfig(nodes=(5,), backend="libvirt", out=str(tmp_path / "vm"))
    launch.calibrate_from(vms)
    assert "this machine's calibration" not in estimate.COSTS.source


def test_the_dry_run_leaves_stored_cells_out_and_names_each_figures_origin(home):
    from experiments.run.summary import dry_run, dry_run_plan

    config = SweepConfig(nodes=(3,), latency_ms=(0.0, 20.0), loss_pct=(0.5,))
    estimate.use(estimate.defaults("host"))
    cells = config.cells()
    whole = dry_run_plan(config, 1, "as asked", 2)
    half = dry_run_plan(config, 1, "as asked", 2, stored=frozenset(c.cell_id for c in cells[:3]))
    assert (whole["to_measure"], half["stored"], half["to_measure"]) == (6, 3, 3)
    assert half["in_cells_s"] < whole["in_cells_s"]
    assert not any(f["measured_here"] for f in whole["figures"])
    found = calibration.learn(config, "host", 2, manifest({"a": (3, 30.0)}), [], None)
    estimate.use(calibration.apply(estimate.defaults("host"), found))
    plan = dry_run_plan(config, 1, "as asked", 2)
    (bringup,) = [f for f in plan["figures"] if f["figure"].startswith("bring-up")]
    assert bringup["measured_here"] and bringup["value"] == pytest.approx(32.0)
    half = dry_run_plan(config, 1, "as asked", 2, stored=frozenset(c.cell_id for c in cells[:3]))
    text = dry_run(config, half)
    assert "3 stored already, 3 to measure" in text and "(measured here)" in text
    assert len(text.splitlines()) <= 6 and "--verbose" in text
    assert len(dry_run(config, half, verbose=True).splitlines()) > 6


def test_the_dry_run_names_the_machine_its_figures_were_measured_on(home, monkeypatch):
    """Issue 43: the estimate says which machine calibrated it (a run's hostname, CPU and
    cores, kept with the calibration), and says so when that is not this machine."""
    from experiments.run.summary import dry_run, dry_run_plan

    config = SweepConfig(nodes=(3,), latency_ms=(0.0,), loss_pct=(0.5,))
    here = calibration.machine_of(calibration.machine_facts())
    estimate.use(estimate.defaults("host"))
    text = dry_run(config, dry_run_plan(config, 1, "as asked", 2))
    assert f"calibrated on: {estimate.DEVELOPMENT_MACHINE}; this machine, {here}," in text
    lab = {"hostname": "lab7", "cpu_model": "Xeon E-2288G", "cpus": 2}
    found = calibration.learn(config, "host", 2, manifest({"a": (3, 30.0)}) | lab, [], None)
    assert found["machine"] == "lab7 (Xeon E-2288G, 2 cores)"
    estimate.use(calibration.apply(estimate.defaults("host"), found))
    plan = dry_run_plan(config, 1, "as asked", 2)
    assert plan["calibrated_on"] == f"lab7 (Xeon E-2288G, 2 cores), last {found['updated']}"
    line = next(x for x in dry_run(config, plan).splitlines() if "calibrated on" in x)
    assert line.endswith(f"(this machine is {here})")  # a home copied from lab7
    found = calibration.learn(
        config, "host", 2, manifest({"a": (3, 30.0)}) | calibration.machine_facts(), [], None
    )
    estimate.use(calibration.apply(estimate.defaults("host"), found))
    line = next(
        x
        for x in dry_run(config, dry_run_plan(config, 1, "as asked", 2)).splitlines()
        if "calibrated on" in x
    )
    assert line == f"  calibrated on: {here}, last {found['updated']}"


def test_one_at_a_time_is_the_schedulers_order_with_its_extra_bring_up(home):
    """A first pass takes one testbed back to a node count it left (the quick preset ran
    5, 3, then 5 nodes again): the dry run's "one at a time" counts that bring-up, as
    the scheduler's replay does, instead of one per node count."""
    from experiments.run.summary import dry_run_plan

    config = SweepConfig(
        nodes=(3, 5), latency_ms=(0.0, 50.0, 100.0), loss_pct=(0.5,), first_pass=(0.0, 50.0)
    )
    estimate.use(estimate.defaults("host"))
    todo = config.cells()
    in_cells, per_node_count = estimate.split_s(config, todo)
    plan = dry_run_plan(config, 1, "as asked", 2)
    assert plan["one_at_a_time_s"] == plan["estimated_s"]
    extra = plan["bringups_and_checks_s"] - per_node_count
    again = [estimate.bringup_s(n) + estimate.prepare_s(config, n) for n in (3, 5)]
    assert any(extra == pytest.approx(cost, abs=1.5) for cost in again), (extra, again)
    single = SweepConfig(nodes=(3,), latency_ms=(0.0, 50.0), loss_pct=(0.5,))
    assert dry_run_plan(single, 1, "as asked", 2)["bringups_and_checks_s"] == round(
        estimate.split_s(single, single.cells())[1]
    )
