"""Idle housekeeping (issue 39, item 3): testbeds that take only writes refresh the
approximate clock and the dynamic snitch less often; the sweep chooses that unless its
YCSB cells read, and records what it chose."""

from pathlib import Path

import pytest

from experiments.settings.config import SweepConfig
from testbed import CassandraSettings, ConfigError, Topology
from testbed.cassandra import config, jvm


def _clock(settings: CassandraSettings) -> list[str]:
    args = jvm.jvm_args(
        settings=settings,
        classpath="/lib/a.jar",
        node_dir=Path("/run/x/nodes/e0"),
        run_id="abc123",
        host="e0",
    )
    return [a for a in args if "approximate_time_precision_ms" in a]


def test_writes_housekeeping_coarsens_the_clock_and_the_snitch(tmp_path):
    topo = Topology(edge_nodes=3)
    standard = CassandraSettings(build="stock")
    writes = CassandraSettings(build="stock", housekeeping="writes")
    assert _clock(standard) == ["-Dcassandra.approximate_time_precision_ms=20"]
    assert _clock(writes) == ["-Dcassandra.approximate_time_precision_ms=100"]
    e0 = topo.host("e0")
    assert "dynamic_snitch_update_interval" not in config.node_settings(
        standard, topo, e0, tmp_path
    )  # Cassandra's own 100 ms
    assert (
        config.node_settings(writes, topo, e0, tmp_path)["dynamic_snitch_update_interval"]
        == "10000ms"
    )
    # a researcher's own setting wins over the testbed's choice
    mine = CassandraSettings(
        build="stock", housekeeping="writes", overrides={"dynamic_snitch_update_interval": "1s"}
    )
    assert config.node_settings(mine, topo, e0, tmp_path)["dynamic_snitch_update_interval"] == (
        "1s"
    )


def test_unknown_housekeeping_is_refused_and_old_states_read_as_standard():
    with pytest.raises(ConfigError, match="unknown housekeeping 'none' .*standard, writes"):
        CassandraSettings(housekeeping="none")  # type: ignore[arg-type]
    stored = CassandraSettings(housekeeping="writes").to_dict()
    assert CassandraSettings.from_dict(stored).housekeeping == "writes"
    stored.pop("housekeeping")  # a state written before it could be chosen
    assert CassandraSettings.from_dict(stored).housekeeping == "standard"
    assert config.describe_housekeeping(CassandraSettings(housekeeping="writes")) == {
        "name": "writes",
        "approximate_time_precision_ms": 100,
        "dynamic_snitch_update_interval": "10000ms",
    }
    assert config.describe_housekeeping(None) is None


def test_the_sweep_takes_writes_housekeeping_unless_ycsb_cells_read():
    assert SweepConfig(housekeeping="auto").node_housekeeping() == "writes"  # writes only
    assert SweepConfig(housekeeping="auto", workload=("writes", "ycsb-a")).node_housekeeping() == (
        "standard"
    )
    assert SweepConfig(housekeeping="standard").node_housekeeping() == "standard"
    assert SweepConfig(housekeeping="writes", workload=("ycsb-c",)).node_housekeeping() == (
        "writes"
    )  # chosen, not auto: the researcher's
    with pytest.raises(ConfigError, match="housekeeping"):
        SweepConfig(housekeeping="coarse")


def test_runs_stored_before_housekeeping_resume_only_as_standard():
    """Stored runs ran the standard housekeeping: their fingerprint is the standard one's,
    and a sweep at auto (writes for the paper's writes) is another configuration."""
    base = {"nodes": [3], "rf": [1], "latency_ms": [0], "loss_pct": [0.5], "writes": 10}
    standard = SweepConfig.from_dict({**base, "housekeeping": "standard"})
    older = dict(standard.to_dict())
    older.pop("housekeeping")
    assert SweepConfig.from_dict({**older, "housekeeping": "standard"}).fingerprint() == (
        standard.fingerprint()
    )
    assert SweepConfig.from_dict(base).fingerprint() == standard.fingerprint()
    assert SweepConfig.from_dict({**base, "housekeeping": "auto"}).fingerprint() != (
        standard.fingerprint()
    )
