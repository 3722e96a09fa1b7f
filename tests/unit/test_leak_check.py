"""The independent leak check's comparison (tests/support/leaks.py), on made-up
inventories; the inventory itself runs for real around every test session."""

from tests.support import leaks


def _inv(**kinds):
    return {kind: set() for kind in leaks.KINDS} | {
        k.replace("_", " "): set(v) for k, v in kinds.items()
    }


def test_a_new_namespace_or_a_removed_rule_of_ours_is_a_difference_an_ended_process_is_not():
    before = _inv(network_namespaces={"theirs", "tb-abc123-e1"},
                  processes={"10 5 java -Dedgetb.run=abc123:e0 x"})  # fmt: skip
    after = _inv(network_namespaces={"theirs", "tb-abc123-e0"},
                 processes={"11 9 java -Dedgetb.run=abc123:e1 y"})  # fmt: skip
    assert leaks.difference(before, after) == [
        "+ network namespaces: tb-abc123-e0",
        "- network namespaces: tb-abc123-e1",
        "+ processes: 11 9 java -Dedgetb.run=abc123:e1 y",
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
        processes={"12 7 java -jar gradle.jar", "13 8 python3 -m experiments.sweep --quick"},
        run_registry={"abc123 -> /tmp/edgetb-tests-x/runs/abc123",
                      "def456 -> /root/.edgetb/runs/def456"},
    )  # fmt: skip
    assert leaks.difference(before, after) == [
        "+ processes: 13 8 python3 -m experiments.sweep --quick",
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
