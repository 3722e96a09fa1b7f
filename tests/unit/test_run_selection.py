"""Analysis uses runs deliberately: by default the newest complete run (and complete runs
of the same configuration), never runs of different configurations pooled; --run names
runs, incomplete ones too; figures and comparisons of other runs never reach a report."""

from functools import partial

import pytest

from analysis import compare, plots, report
from analysis.results import load, run_ids, select_runs
from analysis.synthetic import make_store
from common.errors import ConfigError
from experiments.store.db import RunInfo


def info(run_id, fingerprint="fpA", status="complete", started=0.0, finished=None):
    if finished is None and status != "running":
        finished = started + 1
    return RunInfo(run_id, fingerprint, status, {}, {}, started, finished)


def test_default_is_the_newest_complete_run_and_its_configuration():
    runs = [
        info("a1", "fpA", started=1),
        info("b1", "fpB", started=2),  # another configuration, complete earlier
        info("a2", "fpA", started=3),
        info("b2", "fpB", "interrupted", started=4),  # newer, but not complete
    ]
    chosen, why = select_runs(runs, None, "DIR")
    assert [r.run_id for r in chosen] == ["a1", "a2"] and "configuration" in why
    # A run resumed to completion is newer than one that finished before it.
    runs = [info("old", "fpA", started=1, finished=50), info("new", "fpB", started=2, finished=9)]
    chosen, why = select_runs(runs, None, "DIR")
    assert [r.run_id for r in chosen] == ["old"] and why == "the newest complete run"


def test_named_runs_are_used_as_named_even_incomplete():
    runs = [info("a1"), info("b1", "fpB", "failed", started=2)]
    chosen, why = select_runs(runs, ["b1", "a1", "b1"], "DIR")
    assert [r.run_id for r in chosen] == ["b1", "a1"] and why == "named"
    with pytest.raises(ConfigError, match=r"no run 'zz' in DIR \(runs: a1 \(complete\)"):
        select_runs(runs, ["zz"], "DIR")


def test_no_complete_run_is_a_one_line_error():
    runs = [info("r1", status="interrupted"), info("r2", status="running", started=5)]
    with pytest.raises(ConfigError) as exc:
        select_runs(runs, None, "DIR")
    text = str(exc.value)
    assert "no complete run in DIR" in text and "r2 (running)" in text and "--run" in text
    assert "\n" not in text
    with pytest.raises(ConfigError, match="no runs in DIR yet"):
        select_runs([], None, "DIR")


def test_run_option_takes_repeats_and_comma_lists():
    assert run_ids(None) is None
    assert run_ids(["a,b", "c", "a"]) == ["a", "b", "c"]
    with pytest.raises(ConfigError, match="empty run id"):
        run_ids(["a,,b"])


@pytest.fixture
def two_configs(tmp_path):
    """An old complete 5-node run, then a newer complete 3-node run of another
    configuration, then an unfinished run."""
    grid = partial(make_store, tmp_path, losses=(0.5, 7.5), latencies=(0, 50), writes=20)
    grid(nodes=(5,), run_id="old5", fingerprint="five")
    grid(nodes=(3,), run_id="new3", fingerprint="three")
    grid(nodes=(3,), run_id="cut", fingerprint="three", status="interrupted")
    return tmp_path


def test_load_never_pools_configurations(two_configs):
    results = load(two_configs)
    assert results.run_ids == ["new3"]
    assert {c["nodes"] for c in results.cells} == {3} and len(results.cells) == 2 * 2 * 3
    text = results.describe()
    assert "new3  complete" in text and "12 cells" in text
    assert "not used: old5 (complete), cut (interrupted)" in text
    both = load(two_configs, ["old5", "new3"])
    assert {c["nodes"] for c in both.cells} == {3, 5}
    assert "different configurations" in both.describe()


def test_clis_print_the_runs_and_fail_cleanly_without_a_complete_run(tmp_path, capsys):
    make_store(tmp_path, nodes=(3,), losses=(0.5,), latencies=(0, 50), writes=10, status="failed")
    assert compare.main([str(tmp_path), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no complete run in") and err.count("\n") == 1
    assert compare.main([str(tmp_path), "--run", "synthetic", "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "runs used (named):\n  synthetic  failed" in out and "Runs: synthetic" in out
    assert report.main([str(tmp_path), "--run", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_a_report_shows_only_figures_and_comparison_of_its_runs(two_configs):
    old = load(two_configs, "old5")
    plots.make_all(old)
    assert (old.output_dir / "rtt_n5_loss7.5.png").is_file()
    new = load(two_configs)
    made = {m["name"] for m in plots.make_all(new)}
    assert not (new.output_dir / "rtt_n5_loss7.5.png").exists()  # the old run's figure
    assert sorted(p.stem for p in new.output_dir.glob("*.png")) == sorted(made)
    (new.output_dir / "compare.txt").write_text("of old5")
    (new.output_dir / "compare.json").write_text('{"runs": ["old5"]}')
    page = report.write_report(new).read_text()
    assert page.count("<img") == len(made) and "of old5" not in page
    page = report.write_report(old).read_text()  # figures are new3's: none shown
    assert "<img" not in page and "No figures of these runs yet" in page
    assert "--run old5" in page
