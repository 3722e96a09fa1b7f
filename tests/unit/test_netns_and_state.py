import json
from pathlib import Path

import pytest

from testbed import StateError, Topology
from testbed.backends import make_backend
from testbed.backends.netns import build_commands, planned_namespaces
from testbed.errors import ConfigError, StateFileError
from testbed.state import RunLock, RunState, active_run, create_run
from testbed.testbed import parse_nodetool_status


def test_build_commands_names_and_addresses():
    topo = Topology(edge_nodes=2)
    cmds = build_commands("abc123", topo)
    assert planned_namespaces("abc123", topo) == [
        "tb-abc123-sw",
        "tb-abc123-e0",
        "tb-abc123-e1",
        "tb-abc123-ep",
    ]
    netns_adds = [c[3] for c in cmds if c[:3] == ["ip", "netns", "add"]]
    assert netns_adds == planned_namespaces("abc123", topo)
    # every command targets one of our namespaces: nothing in the machine's own namespace
    for cmd in cmds:
        assert cmd[:3] == ["ip", "netns", "add"] or (
            cmd[1] == "-n" and cmd[2].startswith("tb-abc123-")
        )
    assert ["ip", "-n", "tb-abc123-e1", "addr", "add", "10.77.0.12/24", "dev", "eth0"] in cmds
    veths = [c for c in cmds if "veth" in c]
    assert len(veths) == 3
    assert [
        "ip",
        "-n",
        "tb-abc123-sw",
        "link",
        "add",
        "name",
        "ep",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        "tb-abc123-ep",
    ] in veths


def test_unknown_backend():
    with pytest.raises(ConfigError, match="unknown backend 'vmware'"):
        make_backend("vmware", Topology(), RunState("x", "vmware", {}, None))


def test_state_roundtrip_and_active_run(tmp_path: Path):
    with pytest.raises(StateError, match="no testbed is up"):
        active_run(base=tmp_path)
    state = create_run(RunState("r1", "netns", Topology().to_dict(), None), tmp_path)
    state.processes["e0"] = {"pid": 1, "marker": "m"}
    state.status = "up"
    state.save()
    loaded = active_run(base=tmp_path)
    assert loaded.run_id == "r1" and loaded.processes == {"e0": {"pid": 1, "marker": "m"}}
    with pytest.raises(StateError, match="already exists"):
        create_run(RunState("r1", "netns", {}, None), tmp_path)
    with pytest.raises(StateError, match="no run 'zz'"):
        active_run("zz", base=tmp_path)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(owner_pidd=5), r"unknown keys \['owner_pidd'\]"),
        (lambda d: d.pop("topology"), r"missing keys \['topology'\]"),
        (lambda d: d.update(namespaces="tb-x"), "namespaces is 'tb-x', expected list"),
        (lambda d: d.update(cassandra=[]), r"cassandra is \[\], expected dict or null"),
        (lambda d: d.update(created=True), "created is True, expected int or float"),
        (lambda d: d.update(processes={"e0": {"pid": "9"}}), "processes.e0 needs a pid"),
        (lambda d: d.update(processes={"e0": {"pid": 9}}), "processes.e0 needs a marker"),
        (lambda d: d.update(namespaces=[1]), "namespaces must be names"),
    ],
)
def test_hand_edited_state_is_an_error_naming_the_file(tmp_path: Path, edit, message):
    state = create_run(RunState("r1", "netns", Topology().to_dict(), None), tmp_path)
    data = json.loads(state.path.read_text())
    edit(data)
    state.path.write_text(json.dumps(data))
    with pytest.raises(StateFileError, match=f"corrupt run state {state.path}: {message}"):
        RunState.load(state.run_dir)
    state.path.write_text("[1, 2]")
    with pytest.raises(StateFileError, match="expected a JSON object"):
        RunState.load(state.run_dir)


def test_a_state_whose_topology_is_edited_is_refused_on_attach(tmp_path: Path):
    from testbed.testbed import Testbed

    topo = Topology().to_dict()
    topo["edge_nodes"] = 0
    state = create_run(RunState("r1", "netns", topo, None, status="up"), tmp_path)
    with pytest.raises(StateFileError, match="edge_nodes must be between 1 and 9, got 0"):
        Testbed.attach("r1", base=tmp_path)
    assert state.path.is_file()  # read, not removed


def test_run_lock_is_exclusive(tmp_path: Path):
    first, second = RunLock(tmp_path), RunLock(tmp_path)
    assert first.acquire(blocking=False)
    assert not second.acquire(blocking=False)
    first.release()
    assert second.acquire(blocking=False)
    second.release()


def test_parse_nodetool_status():
    text = """Datacenter: datacenter1
=======================
Status=Up/Down
|/ State=Normal/Leaving/Joining/Moving
--  Address     Load       Tokens  Owns (effective)  Host ID    Rack
UN  10.77.0.11  70.2 KiB   1       33.3%             1f5c       rack1
DN  10.77.0.12  65.1 KiB   1       33.3%             9a0b       rack1
UJ  10.77.0.13  ?          1       ?                 77aa       rack1
"""
    assert parse_nodetool_status(text) == {
        "10.77.0.11": "UN",
        "10.77.0.12": "DN",
        "10.77.0.13": "UJ",
    }
