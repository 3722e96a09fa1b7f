"""The independent leak check's comparison (tests/support/leaks.py), on made-up
inventories; the inventory itself runs for real around every test session."""

import os

from tests.support import leaks


def _inv(**kinds):
    return {kind: set() for kind in leaks.KINDS} | {
        k.replace("_", " "): set(v) for k, v in kinds.items()
    }


def test_a_new_namespace_or_a_removed_rule_of_ours_is_a_difference_an_ended_process_is_not():
    before = _inv(network_namespaces={"theirs", "tb-abc123-e1"},
                  processes={"10 5 java [project] -Dedgetb.run=abc123:e0 x"})  # fmt: skip
    after = _inv(network_namespaces={"theirs", "tb-abc123-e0"},
                 processes={"11 9 java [project] -Dedgetb.run=abc123:e1 y"})  # fmt: skip
    assert leaks.difference(before, after) == [
        "+ network namespaces: tb-abc123-e0",
        "- network namespaces: tb-abc123-e1",
        "+ processes: 11 9 java [project] -Dedgetb.run=abc123:e1 y",
    ]
    assert leaks.difference(before, before) == []


def test_what_the_project_could_not_have_made_is_out_of_scope_not_a_leak(monkeypatch):
    """Another user's memory cgroups, namespaces and JVMs change while the suite runs:
    named as out of scope (cgroups, namespaces), never as differences; processes of
    others are not even listed."""
    monkeypatch.setenv("EDGETB_HOME", "/tmp/edgetb-tests-x")
    before = _inv(cgroups={"/sys/fs/cgroup/memory/user.slice"})
    after = _inv(
        cgroups={"/sys/fs/cgroup/memory/user.slice", "/sys/fs/cgroup/memory/user.slice/job1",
                 "/sys/fs/cgroup/cpu/edgetb/tb-abc123-e0"},
        network_namespaces={"theirs"},
        processes={"12 7 java -jar gradle.jar",
                   "13 8 python3 [project] -m experiments.sweep --quick"},
        run_registry={"abc123 -> /tmp/edgetb-tests-x/runs/abc123",
                      "def456 -> /root/.edgetb/runs/def456"},
    )  # fmt: skip
    assert leaks.difference(before, after) == [
        "+ processes: 13 8 python3 [project] -m experiments.sweep --quick",
        "+ cgroups: /sys/fs/cgroup/cpu/edgetb/tb-abc123-e0",
        "+ run registry: abc123 -> /tmp/edgetb-tests-x/runs/abc123",
    ]
    assert leaks.out_of_scope(before, after) == [
        "+ network namespaces: theirs",
        "+ cgroups: /sys/fs/cgroup/memory/user.slice/job1",
        "+ run registry: def456 -> /root/.edgetb/runs/def456",
    ]


def test_a_tap_on_our_bridge_and_its_qdisc_and_rules_are_ours():
    before = _inv(links={"lo", "eth0"}, qdiscs={"qdisc noqueue 0: dev lo root"})
    after = _inv(
        links={"lo", "eth0", "tb1a2b3cbr", "vnet3 master tb1a2b3cbr", "vnet4 master virbr0"},
        qdiscs={"qdisc noqueue 0: dev lo root", "qdisc fq_codel 0: dev vnet3 root",
                "qdisc fq_codel 0: dev vnet4 root"},
        netfilter_rules={'nft: iifname "vnet3" accept', 'nft: iifname "vnet4" accept'},
    )  # fmt: skip
    assert leaks.difference(before, after) == [
        "+ links: tb1a2b3cbr",
        "+ links: vnet3 master tb1a2b3cbr",
        "+ qdiscs: qdisc fq_codel 0: dev vnet3 root",
        '+ netfilter rules: nft: iifname "vnet3" accept',
    ]
    assert len(leaks.out_of_scope(before, after)) == 3  # vnet4 on another bridge


def test_a_process_is_the_projects_by_its_whole_command_line():
    """A Cassandra JVM's tag comes after ~1 kB of flags, past what the line keeps; a
    nodetool JVM has no tag, only its distribution's path in the project's cache."""
    from common.paths import cache_root

    jvm = "/usr/bin/java " + "-XX:+Flag " * 150 + "-Dedgetb.run=abc123:e0 Main"
    nodetool = f"/usr/bin/java -cp {cache_root()}/cassandra/lib/x.jar NodeTool status"
    assert leaks.NAMES.search(jvm) and not leaks.NAMES.search(jvm[:200])
    assert any(d in nodetool for d in leaks._project_dirs())
    assert leaks.ours(
        "cgroups",
        "/sys/fs/cgroup/cpu/machine.slice/machine-qemu\\x2d3\\x2dtb\\x2dabc123\\x2de0.scope",
        set(),
        "/h",
    )
    assert leaks.ours("netfilter rules", "iptables-save: -A OUTPUT -j EDGETB", set(), "/h")
    assert leaks.ours("network namespaces", "tb-netemprobe42-1f2e", set(), "/h")


def test_another_test_sessions_processes_are_not_this_ones(monkeypatch):
    """Two test runs on one machine: each counts only what its own session started
    (its environment says which), however project-like the other's command lines."""
    import subprocess
    import sys

    monkeypatch.setenv(leaks.SESSION_VAR, "this-session")
    code = "import sys, time; sys.stdin.read()"
    procs = {
        who: subprocess.Popen(
            [sys.executable, "-c", code, f"edgetb-leakcheck-{who}"],
            stdin=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", leaks.SESSION_VAR: session},
        )
        for who, session in (("mine", "this-session"), ("theirs", "other-session"))
    }
    try:
        lines = {line for line in leaks._processes() if "edgetb-leakcheck-" in line}
    finally:
        for proc in procs.values():
            proc.communicate(b"", timeout=10)  # ended by closing its stdin
    ours = {line.split()[0] for line in lines if leaks.OURS_MARK in line}
    assert ours == {str(procs["mine"].pid)}, lines


def test_a_process_this_session_started_is_in_scope_whatever_it_runs(monkeypatch):
    """A ``sleep`` a test forgot carries the session's tag in its environment and no
    project name in its command line: it is this session's; the same under another
    session's tag, or with no tag at all, is not."""
    import subprocess

    monkeypatch.setenv(leaks.SESSION_VAR, "this-session")
    envs = {
        "mine": {leaks.SESSION_VAR: "this-session"},
        "theirs": {leaks.SESSION_VAR: "other-session"},
        "untagged": {},
    }
    # a length of its own per process, so each is found by its command line
    procs = {
        who: subprocess.Popen(
            ["sleep", f"{600 + i}.{os.getpid()}"], env={"PATH": "/usr/bin:/bin", **env}
        )
        for i, (who, env) in enumerate(envs.items())
    }
    try:
        lines = {line for line in leaks._processes() if f".{os.getpid()}" in line}
    finally:
        for proc in procs.values():
            proc.kill()  # a process this test started, by its PID
            proc.wait()
    ours = {line.split()[0] for line in lines if leaks.OURS_MARK in line}
    assert ours == {str(procs["mine"].pid)}, lines
    assert len(lines) == 1  # sleep is no program of the project's: only the tagged one


def test_another_sessions_runs_beside_this_one_are_theirs(monkeypatch):
    """Two test sessions (or a researcher's sweep) on one machine: the objects of a run
    the registry places in another home — its namespaces, VMs and their QEMU, a tap on
    its bridge and that tap's qdisc, its cgroup scope — are that session's, made or
    removed; this session's, or a run the registry does not know, stay in scope."""
    monkeypatch.setenv("EDGETB_HOME", "/tmp/edgetb-tests-x")
    registry = {
        "aaa111 -> /tmp/edgetb-tests-x/runs/aaa111",
        "bbb222 -> /tmp/edgetb-tests-y/runs/bbb222",
    }
    before = _inv(network_namespaces={"tb-ccc333-e0"},
                  run_registry=registry | {"ccc333 -> /root/.edgetb/runs/ccc333"})  # fmt: skip
    after = _inv(
        network_namespaces={"tb-aaa111-e0", "tb-bbb222-e0", "tb-ddd444-e0"},
        links={"tbbbb222br", "vnet7 master tbbbb222br"},
        qdiscs={"qdisc fq_codel 0: dev vnet7 root"},
        libvirt_domains_networks_pools={"list: tb-bbb222-e0"},
        processes={"40 1 qemu-system-x86 [project] -name guest=tb-bbb222-e0,debug-threads=on"},
        cgroups={"/sys/fs/cgroup/cpu/machine.slice/machine-qemu\\x2d3\\x2dtb\\x2dbbb222\\x2de0.scope"},
        run_registry=registry,
    )  # fmt: skip
    assert leaks.difference(before, after) == [
        "+ network namespaces: tb-aaa111-e0",
        "+ network namespaces: tb-ddd444-e0",
    ]
    assert "- network namespaces: tb-ccc333-e0" in leaks.out_of_scope(before, after)
    assert "+ qdiscs: qdisc fq_codel 0: dev vnet7 root" in leaks.out_of_scope(before, after)


def test_a_process_under_another_test_sessions_home_is_that_sessions(monkeypatch, tmp_path):
    """CI, the sessions side by side: the main session's SSH connection master of a
    worker (its environment of its own, neither variable) was counted as a leak of the
    VM session, whose check ended while it was alive."""
    from tests.support import leaks

    own = tmp_path / "edgetb-tests-own1"
    monkeypatch.setenv("EDGETB_HOME", str(own))
    other = "ssh: /tmp/edgetb-tests-iv1y6r4o/workers/458df4f797/edgetb.run=wk-458df4f797:1 [mux]"
    assert leaks.in_another_test_home(other)
    assert not leaks.in_another_test_home(f"ssh: {own}/workers/ab/edgetb.run=wk-ab:1 [mux]")
    assert not leaks.in_another_test_home("java -Dedgetb.run=ab12cd:e0 -cp /root/.cache/x")
