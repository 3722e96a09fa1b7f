"""Quiet nodes (testbed.cassandra.quiet): the one patched line, the classpath and JVM
properties per build, the archive per build. Pure logic; the integration test
tests/integration/test_1e_quiet.py measures what the rebuilt class does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import ConfigError, StateError
from testbed.cassandra import config, jvm, quiet
from testbed.cassandra.config import CassandraSettings
from testbed.cassandra.dist import CassandraDist
from testbed.topology import Topology

SOURCE = "\n".join(
    [
        "class SEPWorker {",
        "    // stopCheckInterval: how long a worker spins alone",
        quiet.STOCK_LINE,
        "    private void maybeStop() {}",
        "}",
    ]
)


def test_patch_changes_exactly_the_stock_line():
    patched = quiet.patch(SOURCE)
    before, after = SOURCE.split("\n"), patched.split("\n")
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [2]
    assert after[2] == quiet.PATCHED_LINE
    assert f'Long.getLong("{quiet.PROPERTY}", TimeUnit.MILLISECONDS.toNanos(10L))' in after[2]


@pytest.mark.parametrize(
    "source",
    [
        SOURCE.replace("toNanos(10L)", "toNanos(20L)"),  # another release: not ours to patch
        SOURCE.replace(quiet.STOCK_LINE, quiet.STOCK_LINE.strip()),  # indentation differs
        SOURCE + "\n" + quiet.STOCK_LINE,  # twice
    ],
)
def test_patch_refuses_a_source_it_does_not_know(source):
    with pytest.raises(StateError, match="expected once"):
        quiet.patch(source)


def _dist(tmp_path: Path) -> CassandraDist:
    return CassandraDist("5.0.6", tmp_path, "maven", {"b.jar": "bb", "a.jar": "aa"})


def test_classpath_and_properties_per_build(tmp_path):
    dist = _dist(tmp_path)
    assert quiet.classpath(dist, "stock") == dist.classpath
    first, rest = quiet.classpath(dist, "quiet").split(":", 1)
    assert first == str(tmp_path / "quiet" / quiet.JAR) and rest == dist.classpath
    assert quiet.jvm_properties("stock") == []
    assert quiet.jvm_properties("quiet") == [f"-D{quiet.PROPERTY}={quiet.STOP_CHECK_NS}"]


def test_jvm_args_carry_the_build_and_refuse_a_mismatched_classpath(tmp_path):
    dist = _dist(tmp_path)

    def args(build, classpath):
        return jvm.jvm_args(
            settings=CassandraSettings(build=build),
            classpath=classpath,
            node_dir=Path("/n"),
            run_id="abc123",
            host="e0",
        )

    stock = args("stock", quiet.classpath(dist, "stock"))
    assert not any(quiet.PROPERTY in a for a in stock)
    assert "-Dcassandra.approximate_time_precision_ms=20" in stock
    quiet_args = args("quiet", quiet.classpath(dist, "quiet"))
    assert f"-D{quiet.PROPERTY}={quiet.STOP_CHECK_NS}" in quiet_args
    # the builds differ by the rebuilt class and its property alone: the same clock (the
    # dynamic snitch times replies with it, so a coarser one moved reads at ONE)
    assert [a for a in quiet_args if a not in stock] == [
        f"-D{quiet.PROPERTY}={quiet.STOP_CHECK_NS}",
        quiet.classpath(dist, "quiet"),
    ]
    assert quiet_args[-2].startswith(str(quiet.jar_path(dist)))
    with pytest.raises(ValueError, match="quiet build"):
        args("quiet", dist.classpath)  # the property alone would silently run stock
    with pytest.raises(ValueError, match="stock build"):
        args("stock", quiet.classpath(dist, "quiet"))


def test_both_builds_write_the_same_cassandra_yaml(tmp_path):
    """Quiet nodes once updated the dynamic snitch every second: reads at ONE then went
    to the ring's first replica (test_3c's cell read 84.9 ms at ONE against stock's 43).
    No cassandra.yaml setting depends on the build; the user's own still apply."""
    topo = Topology(edge_nodes=3)
    host = topo.host("e0")

    def values(**kw):
        return config.node_settings(CassandraSettings(**kw), topo, host, tmp_path)

    assert values(build="quiet") == values(build="stock") == values()
    assert "dynamic_snitch_update_interval" not in values()  # Cassandra's own 100 ms
    snitch = {"dynamic_snitch_update_interval": "50ms"}
    assert values(build="quiet", overrides=snitch)["dynamic_snitch_update_interval"] == "50ms"


def test_each_build_has_its_own_class_data_archive(tmp_path):
    dist = _dist(tmp_path)
    assert dist.cds_archive("17.0.15").name == "cassandra-java17.0.15.jsa"  # as before
    assert dist.cds_archive("17.0.15", "quiet").name == "cassandra-java17.0.15-quiet.jsa"


def test_settings_name_the_build_and_refuse_others():
    assert CassandraSettings().build == "quiet"  # the default since the interleaved A/B
    assert CassandraSettings(build="stock").to_dict()["build"] == "stock"
    assert CassandraSettings.from_dict({"heap_mb": 256}).build == "stock"  # older manifests
    assert CassandraSettings.from_dict(CassandraSettings().to_dict()).build == "quiet"
    with pytest.raises(ConfigError, match="unknown Cassandra build 'loud'"):
        CassandraSettings(build="loud")  # type: ignore[arg-type]


def test_check_names_a_missing_or_changed_jar(tmp_path):
    dist = _dist(tmp_path)
    with pytest.raises(StateError, match="not built.*dist install"):
        quiet.check(dist)
    jar = quiet.jar_path(dist)
    jar.parent.mkdir()
    jar.write_bytes(b"jar")
    (jar.parent / quiet.MANIFEST).write_text(json.dumps({"jar_sha256": quiet._sha256(b"jar")}))
    assert quiet.check(dist) == jar
    jar.write_bytes(b"other")
    with pytest.raises(StateError, match="does not match"):
        quiet.check(dist)


def test_install_refuses_another_version(tmp_path):
    with pytest.raises(StateError, match="5.0.6's sources; this is 5.0.5"):
        quiet.install(CassandraDist("5.0.5", tmp_path, "maven", {}))


def test_runs_stored_while_stock_was_the_default_resume_as_stock():
    """The default build changed (stock -> quiet): a stock run stored before left the
    build out of its fingerprint and must still resume as stock; a quiet run is another
    configuration."""
    from experiments.settings.config import SweepConfig

    base = {"nodes": [3], "rf": [1], "latency_ms": [0], "loss_pct": [0.5], "writes": 10}
    stock = SweepConfig.from_dict({**base, "cassandra_build": "stock"})
    quiet = SweepConfig.from_dict(base)
    assert quiet.cassandra_build == "quiet"
    assert "cassandra_build" not in stock.to_dict() or stock.fingerprint() != quiet.fingerprint()
    older = dict(stock.to_dict())
    older.pop("cassandra_build")  # a configuration stored before the knob existed
    assert SweepConfig.from_dict({**older, "cassandra_build": "stock"}).fingerprint() == (
        stock.fingerprint()
    )
    assert stock.fingerprint() != quiet.fingerprint()
