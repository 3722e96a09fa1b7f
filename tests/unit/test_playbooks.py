"""Playbook runs read per host (a fake ansible-runner result: unreachable, failed, never
reached), and the shipped playbooks never swallow a failure."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from testbed import Topology
from testbed.backends import provision, remote
from testbed.backends.ssh import SSH, RemoteHost


def _result(status="successful", rc=0, events=(), stats=None):
    return SimpleNamespace(status=status, rc=rc, events=list(events), stats=stats)


def _stats(processed, dark=(), failures=()):
    return {
        "processed": {h: 1 for h in processed},
        "dark": {h: 1 for h in dark},
        "failures": {h: 1 for h in failures},
        "ok": {h: 3 for h in processed},
    }


def test_a_complete_run_has_no_failures():
    r = _result(stats=_stats(["e0", "ep"]))
    assert provision.playbook_failures(r, ["e0", "ep"]) == []


def test_unreachable_and_failed_hosts_are_named_with_the_reason():
    events = [
        {
            "event": "runner_on_unreachable",
            "event_data": {
                "host": "e0",
                "task": "what the host has",
                "res": {"msg": "Failed to connect to the host via ssh: No route to host\n"},
            },
        },
        {
            "event": "runner_on_failed",
            "event_data": {
                "host": "ep",
                "task": "netem in the host's kernel",
                "res": {"stderr": "modprobe: FATAL: Module sch_netem not found"},
            },
        },
        {  # a task that said ignore_errors does not count
            "event": "runner_on_failed",
            "event_data": {"host": "e1", "task": "x", "ignore_errors": True, "res": {}},
        },
    ]
    r = _result("failed", 4, events, _stats(["e0", "e1", "ep"], dark=["e0"], failures=["ep"]))
    assert provision.playbook_failures(r, ["e0", "e1", "ep"]) == [
        "e0: unreachable: Failed to connect to the host via ssh: No route to host",
        "ep: task 'netem in the host's kernel': modprobe: FATAL: Module sch_netem not found",
    ]


def test_a_host_no_play_ran_on_is_a_failure_even_when_the_run_succeeded():
    r = _result(stats=_stats(["e0"]))
    assert provision.playbook_failures(r, ["e0", "ep"]) == [
        "ep: not reached by the playbook (successful)"
    ]


def test_failures_without_events_come_from_the_stats_or_the_status():
    r = _result("failed", 4, stats=_stats(["e0"], dark=["e0"]))
    assert provision.playbook_failures(r, ["e0"]) == ["e0: unreachable"]
    r = _result("timeout", 254, stats=_stats(["e0"]))
    assert provision.playbook_failures(r, ["e0"]) == ["* the playbook ended timeout (rc 254)"]
    r = _result("failed", 1, stats=None)  # died before any host
    assert provision.playbook_failures(r, ["e0"]) == ["e0: not reached by the playbook (failed)"]


def test_inventory_hosts_walks_nested_groups(tmp_path):
    ssh = SSH("abc123", tmp_path)
    topo = Topology(edge_nodes=2)
    inv = provision.inventory(
        [RemoteHost(h.name, h.address) for h in topo.hosts],
        {h.name: h.role for h in topo.hosts},
        ssh,
    )
    assert provision.inventory_hosts(inv) == ["e0", "e1", "ep"]
    # the run's inventory names the keys the run trusts: a hosts run on it checks them
    assert inv["all"]["children"]["edge"]["hosts"]["e0"]["edgetb_known_hosts"] == str(
        tmp_path / "known_hosts"
    )


PLAYBOOKS = sorted((Path(remote.__file__).parent.parent / "playbooks").glob("*.yml"))


@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.name)
def test_playbooks_never_swallow_a_failure(path):
    for play in yaml.safe_load(path.read_text()):
        assert not play.get("ignore_unreachable") and not play.get("ignore_errors")
        for task in play.get("tasks", []):
            name = task.get("name")
            assert not task.get("ignore_errors"), name
            assert not task.get("ignore_unreachable"), name
            assert task.get("failed_when", True) is not False, name
            assert str(task.get("failed_when", "")).lower() not in ("false", "no"), name


@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.name)
def test_ansible_loads_every_playbook(path, tmp_path):
    """Ansible's own loader, as a run would (a `raw` script with an odd apostrophe in a
    comment passed a test that rendered and ran it under dash, then failed every teardown
    of the second fresh CI run of 2026-11-29: Ansible splits a free-form module's text)."""
    playbook = Path(sys.executable).parent / "ansible-playbook"
    env = {**os.environ, "ANSIBLE_LOCAL_TEMP": str(tmp_path), "ANSIBLE_HOME": str(tmp_path)}
    check = subprocess.run(
        [str(playbook), "--syntax-check", "-i", "localhost,", str(path)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]


def test_the_project_archive_carries_what_the_hosts_import(tmp_path):
    # what the provision playbook checks on a host: the workload's imports, from the
    # unpacked archive alone (its data file and YCSB's sources ride along)
    import subprocess
    import sys
    import tarfile

    archive = provision.project_archive(tmp_path / "project.tar.gz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        tar.extractall(tmp_path / "src", filter="data")
    for shipped in (
        "workloads/writes.py",
        "common/errors.py",  # below every package: the hosts import it through them
        "workloads/data/nobel_laureates.json",
        "workloads/ycsb/workloads/workloada",
        "workloads/ycsb/java/edgetb/ycsb/CqlClient.java",
    ):
        assert shipped in names
    assert not any("__pycache__" in n for n in names)
    code = (
        "import testbed.client as c, emulation.probe as p, workloads.writes as w, "
        "common.errors as e; "
        "print(c.__file__, p.__file__, w.__file__, e.__file__, w.DATA, w.DATA.is_file())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "src")}, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    *files, found = proc.stdout.split()
    assert found == "True" and all(f.startswith(str(tmp_path / "src")) for f in files), files
