"""The Python entry point (``from experiments import run_sweep``): bad input raises one
ConfigError before anything changes, as the command line's exit 2 does; the command line
is that call behind its flags. (A sweep through it on a real testbed:
tests/integration/test_3e_faults.py, the trace test.)"""

from pathlib import Path

import pytest

import experiments
from common.errors import ConfigError
from experiments import RunOptions, SweepConfig, SweepResult, run_sweep
from experiments import sweep as cli


def _config(tmp_path, **extra):
    return SweepConfig.from_dict(
        {"nodes": [3], "rf": [1], "latency_ms": [0], "loss_pct": [0.5], "writes": 10,
         "out": str(tmp_path / "results"), **extra}
    )  # fmt: skip


@pytest.mark.parametrize(
    "options, message",
    [
        (RunOptions(parallel="lots"), "--parallel"),
        (RunOptions(parallel=0), "--parallel"),
        (RunOptions(worker_timeout=30), "--worker-timeout needs --workers"),
        (RunOptions(scheduler="tls://a:1", workers="inv.ini"), "exclude each other"),
        (RunOptions(scheduler="http://a:1"), "--scheduler must be"),
        (RunOptions(scheduler="tcp://127.0.0.1:8786"), "--insecure-scheduler"),
    ],
)
def test_bad_options_raise_one_line_before_anything_changes(tmp_path, options, message):
    with pytest.raises(ConfigError, match=message) as err:
        run_sweep(_config(tmp_path), options)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "results").exists()  # no results directory, no store, no run


def test_a_bad_setting_is_refused_when_the_configuration_is_made(tmp_path):
    with pytest.raises(ConfigError, match="unknown sweep settings"):
        _config(tmp_path, latency=[0])
    with pytest.raises(ConfigError):
        _config(tmp_path, writes=-1)


def test_the_command_line_makes_the_same_configuration_and_options(tmp_path):
    out = str(tmp_path / "results")
    args = cli.parser().parse_args(["--nodes", "3", "--rf", "1", "--latency", "0",
                                    "--loss", "0.5", "--writes", "10", "--out", out,
                                    "--parallel", "2", "--new-run"])  # fmt: skip
    assert cli.config_from_args(args).fingerprint() == _config(tmp_path).fingerprint()
    assert cli.options_from_args(args) == RunOptions(parallel="2", new_run=True)


def test_the_package_names_its_entry_point_and_nothing_else():
    assert experiments.run_sweep is run_sweep and experiments.SweepResult is SweepResult
    assert not SweepResult(Path("."), None, "failed", 1).ok
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        experiments.nope  # noqa: B018
