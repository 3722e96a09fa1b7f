"""Fault schedules, the pure parts: the grammar, the checks against a topology, the
--fault list (a partition's groups have commas), labels in cell ids, the matrix of a
partition or a slow link, and when a step is due."""

import pytest

from common.errors import ConfigError
from emulation import links
from experiments.run import nemesis
from experiments.settings import faults
from experiments.settings.config import SweepConfig
from testbed import Topology


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
    assert dict(s.values) == {"delay_ms": 200, "loss_pct": 10}
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


def test_none_in_any_case_and_no_link_fault_with_a_trace():
    grid = {"nodes": (3,), "rf": (3,), "latency_ms": (20.0,), "loss_pct": (0.5,)}
    assert SweepConfig(**grid, fault=("NONE",)).fault == ("none",)  # type: ignore[arg-type]
    # one name, not a list (as a config file may give it), as for every other dimension
    assert SweepConfig(**grid, fault="kill:e1@30%").fault == ("kill:e1@30%",)  # type: ignore[arg-type]
    assert SweepConfig(**grid, trace="NONE").trace == ("none",)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lists a value twice"):
        SweepConfig(**grid, fault=("none", "None"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="changes links, and so does a trace"):
        SweepConfig(**grid, fault=("partition:e0|e1@1s",), trace=("lte-handover",))  # type: ignore[arg-type]
    SweepConfig(**grid, fault=("kill:e1@30%",), trace=("lte-handover",))  # type: ignore[arg-type]


def test_the_fault_window_ends_when_a_started_node_is_back():
    from analysis.faults import window_ns

    events = [
        {"step": "make", "what": "kill", "at_ns": 100},
        {"step": "heal", "what": "heal kill", "at_ns": 200},
        {"step": "started", "what": "start e1", "at_ns": 200, "ready_s": 3.0},
    ]
    assert window_ns({"fault_log": {"events": events}}) == (100, 200 + 3_000_000_000)
    restart = [
        {"step": "make", "what": "restart", "at_ns": 100},
        {"step": "started", "what": "start e1", "at_ns": 100, "ready_s": 1.0, "stopped_s": 0.5},
    ]
    assert window_ns({"fault_log": {"events": restart}}) == (100, 100 + 1_000_000_000)
    assert window_ns({"fault_log": {"events": events[:1]}}) == (100, None)


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
    assert slow.link("e0", "e1").loss_pct == 0.5  # the cell's loss stays: only delay given
    assert slow.link("e0", "e2") == base.link("e0", "e2")
    lossy = faults.faulted_matrix(base, faults.parse("links:e0-e1:loss=10@1s"))  # type: ignore[arg-type]
    assert lossy.link("e1", "e0") == links.Link(20, 0, 10)  # the cell's 20 ms stays


def test_when_a_step_is_due():
    at = faults.Offset(0.3, "%")
    assert not at.due(299, 1000, 99.0) and at.due(300, 1000, 0.0)
    secs = faults.Offset(5, "s")
    assert not secs.due(1000, 1000, 4.9) and secs.due(0, 1000, 5.0)


def test_traces_read_checked_and_stepped(tmp_path):
    from emulation import trace

    path = tmp_path / "t.csv"
    path.write_text(
        "t_s,src,dst,delay_ms,jitter_ms,loss_pct,rate_mbit\n"
        "0,*,*,10,,,\n2,e0,e1,40,5,1,\n2,e1,e0,40,5,1,\n5,e0,*,0,,,\n"
    )
    t = trace.load(str(path))
    assert [s.t_s for s in t.steps] == [0, 2, 5] and t.duration_s == 5
    top = Topology(edge_nodes=2)
    t.check(top)
    (_, m0), (_, m1), (_, m2) = t.matrices(links.uniform(top, 20, 0))
    assert m0.link("ep", "e1").delay_ms == 10
    assert m1.link("e0", "e1") == links.Link(40, 5, 1) and m1.link("e1", "ep").delay_ms == 10
    assert not m2.link("e0", "ep").shaped and m2.link("e1", "e0").delay_ms == 40
    with pytest.raises(ConfigError, match="names host 'e0'"):
        t.check(Topology(edge_nodes=1, edge_names=("x0",)))
    for sample in ("lte-handover", "lte-3g-fallback", "lte-bufferbloat"):
        trace.load(sample).check(Topology(edge_nodes=3))


@pytest.mark.parametrize(
    "text, message",
    [
        ("t_s,src,dst\n0,e0,e1\n", "no column 'delay_ms'"),
        ("t_s,src,dst,delay_ms,color\n0,e0,e1,5,red\n", "unknown column 'color'"),
        ("t_s,src,dst,delay_ms\n5,e0,e1,5\n1,e0,e1,5\n", "line 3: t_s 1 must be"),
        ("t_s,src,dst,delay_ms\n0,e0,e0,5\n", "src and dst must be two hosts"),
        ("t_s,src,dst,delay_ms\n0,e0,e1,fast\n", "delay_ms 'fast' is not a number"),
        ("t_s,src,dst,delay_ms,jitter_ms\n0,e0,e1,5,9\n", "jitter_ms \\(9\\) cannot exceed"),
    ],
)
def test_bad_traces_are_one_line_errors(tmp_path, text, message):
    from emulation import trace

    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        trace.load(str(path))
    with pytest.raises(ConfigError, match="no such file, nor a shipped sample"):
        trace.load(str(tmp_path / "missing.csv"))


def test_a_fault_figure_keeps_a_cell_id_with_dots_whole(tmp_path):
    """Cell ids have dots (p0.5): the figure is saved under the whole id, which the
    report links to (Path.with_suffix cut it at p0.)."""
    from analysis.faults import figures

    reqs = [
        {"t_start_ns": 10**9 * i, "rtt_ns": 40_000_000, "error": None if i % 5 else "Unavailable"}
        for i in range(20)
    ]
    cell = {
        "cell_id": "n3-rf3-l20-p0.5-fkill_e1@30p-r1", "fault": "kill:e1@30%", "trace": None,
        "nodes": 3, "rf": 3, "cl": "QUORUM", "latency_ms": 20.0, "loss_pct": 0.5,
        "requests": reqs,
        "fault_log": {"events": [{"step": "make", "what": "kill", "at_ns": 5 * 10**9}]},
    }  # fmt: skip
    (made,) = figures([cell], tmp_path)
    assert made["name"] == "fault_n3-rf3-l20-p0.5-fkill_e1@30p-r1"
    for fmt in ("png", "svg"):
        assert (tmp_path / f"{made['name']}.{fmt}").is_file()


DESCRIBECLUSTER = """Cluster Information:
\tName: edgetb
\tSnitch: org.apache.cassandra.locator.SimpleSnitch
\tDynamicEndPointSnitch: enabled
\tPartitioner: org.apache.cassandra.dht.Murmur3Partitioner
\tSchema versions:
\t\t2207c2a9-f598-3971-986b-2926e09e239d: [10.0.0.2:7000, 10.0.0.3:7000]

\t\tUNREACHABLE: [10.0.0.4:7000]

Stats for all nodes:
\tLive: 2
\tJoining: 0
"""


def test_schema_versions_of_describecluster():
    assert nemesis.schema_versions(DESCRIBECLUSTER) == [
        "2207c2a9-f598-3971-986b-2926e09e239d",
        "UNREACHABLE",
    ]
    agreed = DESCRIBECLUSTER.replace("\n\t\tUNREACHABLE: [10.0.0.4:7000]\n", "")
    assert nemesis.schema_versions(agreed) == ["2207c2a9-f598-3971-986b-2926e09e239d"]


def test_the_nodes_away_and_a_fault_cells_own_keys():
    from experiments.run.measure import key_seed
    from experiments.settings.cells import Cell

    restart = [
        {"step": "make", "what": "restart", "at_ns": 100},
        {"step": "started", "what": "start e1", "at_ns": 100, "ready_s": 1.0},
    ]
    fault = faults.parse("restart:e1@30%")
    assert fault is not None
    assert nemesis.away(fault, restart) == {"e1": (100, 100 + 1_000_000_000)}
    kill = faults.parse("kill:e1,e2@30%")  # started again only after the cell
    assert kill is not None
    assert nemesis.away(kill, restart[:1]) == {"e1": (100, None), "e2": (100, None)}
    link = faults.parse("links:e0-e1:delay=100@30%-50%")
    assert link is not None and nemesis.away(link, restart) == {}  # no node is away
    cfg = SweepConfig()
    plain = [Cell(3, 3, lat, 0.5, 1) for lat in (0.0, 20.0)]
    assert key_seed(cfg, plain[0]) == key_seed(cfg, plain[1])  # same keys, same replicas
    faulted = {
        key_seed(cfg, Cell(3, 3, 0.0, 0.5, 1, fault=f)) for f in ("kill:e1@30%", "pause:e1@30%-60%")
    }
    assert len(faulted) == 2 and key_seed(cfg, plain[0]) not in faulted
