"""The independent leak check's comparison (tests/support/leaks.py), on made-up
inventories; the inventory itself runs for real around every test session."""

from tests.support import leaks


def _inv(**kinds):
    return {kind: set() for kind in leaks.KINDS} | {
        k.replace("_", " "): set(v) for k, v in kinds.items()
    }


def test_a_new_namespace_or_a_removed_rule_is_a_difference_an_ended_process_is_not():
    before = _inv(network_namespaces={"theirs"}, processes={"10 5 java x"},
                  cgroups={"/sys/fs/cgroup/cpu/theirs"})  # fmt: skip
    after = _inv(network_namespaces={"theirs", "tb-abc123-e0"}, processes={"11 9 java y"})
    assert leaks.difference(before, after) == [
        "+ network namespaces: tb-abc123-e0",
        "+ processes: 11 9 java y",
        "- cgroups: /sys/fs/cgroup/cpu/theirs",
    ]
    assert leaks.difference(before, before) == []
