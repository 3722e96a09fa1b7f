import errno
import fcntl
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from common.errors import ConfigError, RunSelectionError, StateFileError
from common.tags import tag_of
from testbed import StateError, Topology
from testbed.access import parse_nodetool_status
from testbed.backends import make_backend
from testbed.backends.netns import build_commands, planned_namespaces
from testbed.ownership import RunLock, registered_runs, unregister
from testbed.state import RunState, create_run, known_runs, run_of, select_run


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


@pytest.fixture(autouse=True)
def registry(tmp_path, monkeypatch):
    """A registry of this test's own (the machine-wide one is never touched)."""
    monkeypatch.setenv("EDGETB_REGISTRY", str(tmp_path / "registry"))
    return tmp_path / "registry"


def _up(base: Path, run_id: str, *, detached: bool) -> RunLock:
    lock = create_run(RunState(run_id, "netns", Topology().to_dict(), None), base)
    state = RunState.load(base / "runs" / run_id)
    state.status, state.detached = "up", detached
    state.save()
    return lock


def test_state_roundtrip_and_select_run(tmp_path: Path):
    with pytest.raises(RunSelectionError, match="no testbed is up"):
        select_run(base=tmp_path)
    lock = _up(tmp_path, "a00001", detached=True)
    lock.release()  # `up` ended: detached, owned by nobody
    state = RunState.load(tmp_path / "runs" / "a00001")
    state.processes["e0"] = {"pid": 1, "marker": "m"}
    state.save()
    loaded = select_run(base=tmp_path)
    assert loaded.run_id == "a00001" and loaded.processes == {"e0": {"pid": 1, "marker": "m"}}
    with pytest.raises(StateError, match="already exists"):
        create_run(RunState("a00001", "netns", {}, None), tmp_path)
    with pytest.raises(RunSelectionError, match="no run 'abcdef'"):
        select_run("abcdef", base=tmp_path)
    with pytest.raises(RunSelectionError, match="invalid run '../x'"):
        select_run("../x", base=tmp_path)


def test_a_state_from_before_the_records_is_read_into_them(tmp_path: Path):
    from emulation.shapers import EmulationRecord, GatewayRecord
    from testbed.cgroups import CgroupRecord
    from testbed.qdisc import QdiscRecord

    lock = _up(tmp_path, "a00004", detached=True)
    lock.release()
    path = tmp_path / "runs" / "a00004" / "state.json"
    old = json.loads(path.read_text())
    for key in ("options", "timings", "parts"):
        del old[key]
    old["extra"] = {
        "backend": {"resources": {"cpu": 1}},
        "timings": {"total": 9.5},
        "cgroups": {"e0": {"cpu": "/sys/fs/cgroup/cpu/tb-a00004-e0"}},
        "emulation": {
            "shaper": "gateway",
            "matrix": {"profile": "none", "links": []},
            "gateway": {"pid": 77, "boot_s": 3.0, "accel": "tcg", "structure": {}},
            "qdisc_before": {"e0": {"eth0": "qdisc noqueue 0: root refcnt 2"}},
        },
    }
    path.write_text(json.dumps(old))
    state = RunState.load(path.parent)
    assert state.options == {"resources": {"cpu": 1}} and state.timings == {"total": 9.5}
    assert state.get(CgroupRecord) == CgroupRecord(
        {"e0": {"cpu": "/sys/fs/cgroup/cpu/tb-a00004-e0"}}
    )
    assert state.get(GatewayRecord) == GatewayRecord(77, 3.0, "tcg", {})
    assert state.get(QdiscRecord) == QdiscRecord({"e0": {"eth0": "qdisc noqueue 0: root refcnt 2"}})
    emulation = state.get(EmulationRecord)
    assert emulation is not None and emulation.shaper == "gateway" and emulation.matrix
    state.save()  # written back in today's form
    assert "extra" not in json.loads(path.read_text())


def test_a_run_is_selected_by_its_name_as_by_its_id(tmp_path: Path):
    from testbed.state import check_name

    for bad in ("Lab", "1lab", "abc123", "lab_1", "a" * 25, ""):
        with pytest.raises(ConfigError, match="testbed name"):
            check_name(bad)
    assert check_name("lab-1") == "lab-1"
    lock = create_run(
        RunState("a00003", "netns", Topology().to_dict(), None, name="lab1"), tmp_path
    )
    lock.release()
    assert select_run("lab1", base=tmp_path).run_id == "a00003"
    assert select_run("a00003", base=tmp_path).name == "lab1"
    with pytest.raises(RunSelectionError, match="no testbed named 'lab2'"):
        select_run("lab2", base=tmp_path)


def test_each_part_reads_back_its_own_typed_record(tmp_path: Path):
    from emulation.shapers import EmulationRecord, HostShaperRecord
    from testbed.cgroups import CgroupRecord

    lock = _up(tmp_path, "a00002", detached=True)
    lock.release()
    state = RunState.load(tmp_path / "runs" / "a00002")
    assert state.get(HostShaperRecord) is None  # a part the run never used
    state.put(HostShaperRecord(pid=42, socket="/s", links=[["10.0.0.2", "10.0.0.3", 0]]))
    state.put(CgroupRecord({"e0": {"cpu": "/sys/fs/cgroup/cpu/tb-a00002-e0"}}))
    state.save()
    saved = json.loads(state.path.read_text())["parts"]
    assert saved["shaper.host"]["pid"] == 42 and saved["cgroups"]["dirs"]["e0"]["cpu"]
    # a field this version does not know is dropped; one it has is read back typed
    saved["shaper.host"]["retired_field"] = 1
    saved["emulation"] = {"shaper": "host", "matrix": None}
    state.path.write_text(json.dumps({**json.loads(state.path.read_text()), "parts": saved}))
    loaded = RunState.load(state.path.parent)
    host = loaded.get(HostShaperRecord)
    assert host == HostShaperRecord(pid=42, socket="/s", links=[["10.0.0.2", "10.0.0.3", 0]])
    assert loaded.get(EmulationRecord) == EmulationRecord(shaper="host")
    loaded.drop(HostShaperRecord)
    loaded.save()
    assert "shaper.host" not in json.loads(state.path.read_text())["parts"]
    # a field of the wrong type is named, not met later as a TypeError mid-teardown
    from testbed.backends.libvirt import LibvirtRecord

    data = json.loads(state.path.read_text())
    data["parts"] = {"libvirt": {"domains": 5}}
    state.path.write_text(json.dumps(data))
    with pytest.raises(StateFileError, match=r"libvirt: domains is 5, expected list\[str\]"):
        RunState.load(state.path.parent).get(LibvirtRecord)
    # a record that is not an object is named as a corrupt state
    state.path.write_text(
        json.dumps({**json.loads(state.path.read_text()), "parts": {"cgroups": 3}})
    )
    with pytest.raises(StateFileError, match="corrupt run state .*: cgroups is 3"):
        RunState.load(state.path.parent).get(CgroupRecord)


def test_select_run_never_picks_a_run_in_use(tmp_path: Path):
    owned = _up(tmp_path, "b00001", detached=False)  # e.g. a sweep's testbed
    with pytest.raises(RunSelectionError, match=r"b00001 \(in use by pid \d+"):
        select_run(base=tmp_path)
    assert select_run("b00001", base=tmp_path).run_id == "b00001"  # named: allowed
    _up(tmp_path, "b00002", detached=True).release()
    assert select_run(base=tmp_path).run_id == "b00002"  # the one detached testbed
    _up(tmp_path, "b00003", detached=True).release()
    with pytest.raises(RunSelectionError, match="several testbeds are up"):
        select_run(base=tmp_path)
    owned.release()  # the owner died without detaching: a crashed run's leftover
    for rid in ("b00002", "b00003"):
        shutil.rmtree(tmp_path / "runs" / rid)
    with pytest.raises(RunSelectionError, match="b00001 \\(left by a process that died"):
        select_run(base=tmp_path)


def test_create_run_holds_the_owner_lock_and_registers(tmp_path: Path, registry: Path):
    lock = create_run(RunState("c00001", "netns", {}, None), tmp_path)
    run_dir = tmp_path / "runs" / "c00001"
    holder = RunLock(run_dir).holder()
    assert lock.held and holder is not None and holder["pid"] == os.getpid()
    assert not RunLock(run_dir).acquire(blocking=False)
    assert registered_runs() == {"c00001": run_dir.resolve()}
    other_home = tmp_path / "other"
    create_run(RunState("c00002", "netns", {}, None), other_home).release()
    assert set(known_runs(tmp_path)) == {"c00001", "c00002"}  # every home, via the registry
    lock.release()
    assert RunLock(run_dir).holder() is None
    unregister("c00001", run_dir)
    assert set(registered_runs()) == {"c00002"}


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
    state = RunState("d00001", "netns", Topology().to_dict(), None)
    create_run(state, tmp_path).release()
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
    state = RunState("d00002", "netns", topo, None, status="up")
    create_run(state, tmp_path).release()
    with pytest.raises(StateFileError, match="edge_nodes must be between 1 and 9, got 0"):
        Testbed.attach("d00002", base=tmp_path)
    assert state.path.is_file()  # read, not removed


def test_run_lock_is_exclusive(tmp_path: Path):
    first, second = RunLock(tmp_path), RunLock(tmp_path)
    assert first.acquire(blocking=False)
    assert not second.acquire(blocking=False)
    first.release()
    assert second.acquire(blocking=False)
    second.release()


def test_object_names_and_process_tags_follow_the_strict_pattern():
    assert run_of("tb-3fa2c1-e0") == "3fa2c1" and run_of("tb-3fa2c1-sw") == "3fa2c1"
    for other in (
        "tb-foo",
        "tb-x-y",
        "tb-3fa2c1",
        "tb-3FA2C1-e0",
        "tb-3fa2c1-e0-x",
        "xtb-3fa2c1-e0",
    ):
        assert run_of(other) is None, other
    assert tag_of(b"java\0-Xmx1g\0-Dedgetb.run=3fa2c1:e0\0Main\0") == "3fa2c1"
    assert tag_of(b"qemu-system-x86_64\0-name\0guest=edgetb.run=3fa2c1:gateway\0") == "3fa2c1"
    assert tag_of(b"ssh: /root/.edgetb/runs/3fa2c1/ssh/edgetb.run=3fa2c1:10.77.0.11 [mux]") == (
        "3fa2c1"
    )
    for cmdline in (
        b"grep\0edgetb.run=\0",
        b"grep\0-Dedgetb.run=x:e0\0",
        b"vim\0edgetb.run=3fa2c1:e0\0",
    ):
        assert tag_of(cmdline) is None, cmdline


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


def test_a_lock_on_a_removed_run_is_not_taken(tmp_path: Path, monkeypatch):
    run_dir = tmp_path / "runs" / "e00001"
    run_dir.mkdir(parents=True)
    lock = RunLock(run_dir)
    assert lock.acquire(blocking=False)
    waiter = RunLock(run_dir)
    lock.release()
    shutil.rmtree(run_dir)  # the owner's `down` removed the run meanwhile
    with pytest.raises(StateError, match="is gone"):
        waiter.acquire(blocking=False)
    # a waiter blocked on the lock while the owner's `down` removed the run
    run_dir.mkdir()
    owner = RunLock(run_dir)
    assert owner.acquire(blocking=False)
    outcome: list[object] = []
    blocked = threading.Event()  # the waiter found the lock taken: it waits on the file
    flock = fcntl.flock

    def flock_noting_a_wait(fd, operation) -> None:
        try:
            flock(fd, operation)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                blocked.set()
            raise

    monkeypatch.setattr(fcntl, "flock", flock_noting_a_wait)

    def wait() -> None:
        try:
            outcome.append(RunLock(run_dir).acquire(blocking=False, wait_s=5.0))
        except StateError as exc:
            outcome.append(exc)

    waiter_thread = threading.Thread(target=wait)
    waiter_thread.start()
    assert blocked.wait(10), "the waiter did not try the lock"
    shutil.rmtree(run_dir)
    owner.release()
    waiter_thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], StateError), outcome
    assert "was removed" in str(outcome[0])


def test_clean_leaves_young_unfinished_dirs_and_removes_old_ones(tmp_path: Path, registry):
    from testbed import clean as clean_mod

    young = tmp_path / "runs" / ".f00001.abcd"
    old = tmp_path / "runs" / ".f00002.abcd"
    for d in (young, old):
        d.mkdir(parents=True)
    os.utime(old, (1, 1))
    registry.mkdir(parents=True)
    stray = registry / ".f00003.123"
    stray.symlink_to(tmp_path)
    os.utime(stray, (1, 1), follow_symlinks=False)
    clean_mod._remove_unfinished_dirs(tmp_path)
    clean_mod._remove_stray_registry_entries()
    assert young.is_dir() and not old.exists() and not stray.is_symlink()


def test_a_failed_remote_teardown_is_kept_and_clean_retries_it(tmp_path, monkeypatch):
    # `down` on machines that outlive the run (hosts backend) failed: the run's state is
    # kept, and `clean --run` tries the teardown again until it succeeds
    import testbed.backends as backends
    from common.errors import TeardownError
    from testbed import clean as clean_mod
    from testbed.state import TEARDOWN_FAILED

    tries = []

    class Flaky:
        def destroy(self):
            tries.append(1)
            if len(tries) == 1:
                raise TeardownError("e0: unreachable over SSH")

    monkeypatch.setattr(backends, "make_backend", lambda name, topology, state: Flaky())
    lock = create_run(RunState("d00001", "hosts", Topology().to_dict(), None), tmp_path)
    state = RunState.load(tmp_path / "runs" / "d00001")
    state.status = TEARDOWN_FAILED
    state.save()
    lock.release()
    said: list[str] = []
    report = clean_mod.clean(tmp_path, said.append, "d00001")
    assert report.skipped == ["d00001"] and report.runs == []
    assert (tmp_path / "runs" / "d00001").is_dir() and "failed again" in said[0]
    report = clean_mod.clean(tmp_path, said.append, "d00001")
    assert report.runs == ["d00001"] and not (tmp_path / "runs" / "d00001").exists()
    assert len(tries) == 2


def test_clean_keeps_a_run_another_version_wrote_unless_named(tmp_path: Path):
    from testbed.clean import _keep_reason

    lock = _up(tmp_path, "a00005", detached=True)
    lock.release()
    run_dir = tmp_path / "runs" / "a00005"
    data = json.loads((run_dir / "state.json").read_text())
    (run_dir / "state.json").write_text(json.dumps({**data, "a_newer_field": 1}))
    reason = _keep_reason(run_dir, named=False, all_detached=True)
    assert reason and "another version of edgetb" in reason
    assert _keep_reason(run_dir, named=True, all_detached=False) is None


def test_clean_leaves_the_detached_testbeds_of_another_home(tmp_path: Path, registry):
    """Homes share the machine's registry: a `clean --all` in one removed another
    researcher's detached testbed (healthy or with a node down). It is theirs unless
    named; a crashed run of theirs (no owner, not detached) is still leftovers. (Only
    named runs are cleaned here: a bare clean sweeps the machine's orphans, and other
    testbeds run beside the tests.)"""
    from testbed import clean as clean_mod

    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    _up(theirs, "b00001", detached=True).release()  # its namespaces gone: unhealthy
    _up(theirs, "b00002", detached=False).release()  # its owner died
    _up(mine, "b00003", detached=True).release()  # one of mine, as unhealthy
    other, crashed = theirs / "runs" / "b00001", theirs / "runs" / "b00002"
    reason = clean_mod._keep_reason(other, named=False, all_detached=True, base=mine)
    assert reason and "a detached testbed of another home" in reason
    assert clean_mod._keep_reason(crashed, named=False, all_detached=True, base=mine) is None
    own = mine / "runs" / "b00003"
    assert clean_mod._keep_reason(own, named=False, all_detached=True, base=mine) is None
    assert clean_mod._keep_reason(other, named=True, all_detached=False, base=mine) is None
    said: list[str] = []
    report = clean_mod.clean(mine, said.append, "b00001")  # named: removed
    assert report.runs == ["b00001"] and not other.exists()
