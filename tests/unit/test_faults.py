"""Fault schedules, the pure parts: the grammar, the checks against a topology, the
--fault list (a partition's groups have commas), labels in cell ids, the matrix of a
partition or a slow link, and when a step is due."""

import pytest

from emulation import links
from experiments import faults
from experiments.config import SweepConfig
from testbed import Topology
from testbed.errors import ConfigError


def test_the_grammar():
    k = faults.parse("kill:e1@30%")
    assert k is not None and (k.kind, k.nodes, k.start, k.end) == (
        "kill",
        ("e1",),
        faults.Offset(0.3, "%"),
        None,
    )
    p = faults.parse("partition:e0,e1|e2,e3,e4@20%-60%")
    assert p is not None and p.groups == (("e0", "e1"), ("e2", "e3", "e4"))
    assert p.end == faults.Offset(0.6, "%")
    s = faults.parse("links:e0-e1,e1-e2:delay=200,loss=10@5s-10s")
    assert s is not None and s.pairs == (("e0", "e1"), ("e1", "e2"))
    assert s.link == links.Link(delay_ms=200, loss_pct=10)
    assert s.start == faults.Offset(5, "s")
    assert faults.parse("none") is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("boom:e1@3%", "unknown fault 'boom:e1@3%'"),
        ("kill:e1", "say when"),
        ("kill:e1@130%", "not within 0-100 %"),
        ("kill:e1@soon", "is not like 30% or 5s"),
        ("pause:e1@60%-30%", "must come after the start"),
        ("pause:e1@10%-5s", "must come after the start"),
        ("restart:e1@10%-20%", "a restart happens at one offset"),
        ("partition:e0,e1@20%", "at least two groups"),
        ("partition:e0|e0,e1@20%", "a host is in two groups"),
        ("links:e0-e0:delay=5@1s", "is not a link like e0-e1"),
        ("links:e0-e1:lag=5@1s", "is not one of delay="),
        ("links:e0-e1:loss=120@1s", "loss_pct must be between 0 and 100"),
    ],
)
def test_bad_faults_are_one_line_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        faults.parse(text)


def test_faults_are_checked_against_the_hosts():
    three = Topology(edge_nodes=3)
    with pytest.raises(ConfigError, match="unknown host 'e4' on 3 nodes"):
        faults.parse("kill:e4@30%").check(three)  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="only edge nodes run Cassandra"):
        faults.parse("kill:ep@30%").check(three)  # type: ignore[union-attr]
    faults.parse("partition:ep,e0|e1,e2@1s").check(three)  # type: ignore[union-attr]


def test_the_fault_list_keeps_a_partitions_groups_together():
    assert faults.split_list("none,kill:e1@30%,partition:e0,e1|e2,e3@20%-60%") == [
        "none",
        "kill:e1@30%",
        "partition:e0,e1|e2,e3@20%-60%",
    ]
    assert faults.split_list("links:e0-e1,e1-e2:delay=5,loss=1@1s") == [
        "links:e0-e1,e1-e2:delay=5,loss=1@1s"
    ]


def test_labels_are_one_to_one_and_cells_without_a_fault_keep_their_ids():
    a = faults.parse("partition:e0,e1|e2@20%-60%")
    b = faults.parse("partition:e0|e1,e2@20%-60%")
    assert a is not None and b is not None and a.label != b.label
    grid = {"nodes": (3,), "rf": (3,), "latency_ms": (20.0,), "loss_pct": (0.5,)}
    ids = [c.cell_id for c in SweepConfig(**grid, fault=("none", "kill:e1@30%")).cells()]  # type: ignore[arg-type]
    assert ids == ["n3-rf3-l20-p0.5-r1", "n3-rf3-l20-p0.5-fkill_e1@30p-r1"]
    # a grid without faults resumes the runs stored before faults existed
    plain = SweepConfig(**grid).fingerprint()  # type: ignore[arg-type]
    assert plain == SweepConfig(**grid, fault=("none",)).fingerprint()  # type: ignore[arg-type]
    assert plain != SweepConfig(**grid, fault=("kill:e1@30%",)).fingerprint()  # type: ignore[arg-type]


def test_faults_need_the_netns_backend_and_the_writes():
    with pytest.raises(ConfigError, match="netns backend"):
        SweepConfig(backend="libvirt", fault=("kill:e1@30%",))
    with pytest.raises(ConfigError, match="not with YCSB workloads"):
        SweepConfig(workload=("ycsb-a",), nodes=(3,), rf=(3,), fault=("kill:e1@30%",))


def test_a_partition_cuts_the_groups_apart_and_keeps_the_rest():
    top = Topology(edge_nodes=3)
    base = links.uniform(top, 20, 0.5)
    f = faults.parse("partition:e0|e1,e2@20%-60%")
    assert f is not None
    cut = faults.faulted_matrix(base, f)
    assert cut.link("e0", "e1").loss_pct == 100 and cut.link("e2", "e0").loss_pct == 100
    assert cut.link("e1", "e2") == base.link("e1", "e2")
    assert cut.link("ep", "e0") == base.link("ep", "e0")  # the endpoint reaches everyone
    slow = faults.faulted_matrix(base, faults.parse("links:e0-e1:delay=200@1s"))  # type: ignore[arg-type]
    assert slow.link("e0", "e1").delay_ms == 200 == slow.link("e1", "e0").delay_ms
    assert slow.link("e0", "e2") == base.link("e0", "e2")


def test_when_a_step_is_due():
    at = faults.Offset(0.3, "%")
    assert not at.due(299, 1000, 99.0) and at.due(300, 1000, 0.0)
    secs = faults.Offset(5, "s")
    assert not secs.due(1000, 1000, 4.9) and secs.due(0, 1000, 5.0)
