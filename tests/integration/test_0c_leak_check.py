"""The independent leak check (tests/support/leaks.py) sees what it must: a namespace,
its mount and a link made and removed here with `ip`, as `ip` and the mount table show
them, with no help from the testbed's own names or tags."""

import os
import subprocess

from tests.support import leaks


def _mine(diff: list[str], name: str) -> list[str]:
    return [line for line in diff if name in line]  # another run's changes are not ours


def test_the_inventory_sees_a_namespace_its_mount_and_a_link_come_and_go():
    name = f"leakcheck{os.getpid()}"
    before = leaks.take()
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "link", "add", f"{name}a", "type", "veth", "peer", "name",
                        f"{name}b", "netns", name], check=True)  # fmt: skip
        made = _mine(leaks.difference(before, leaks.take()), name)
    finally:
        subprocess.run(["ip", "link", "del", f"{name}a"], check=False)
        subprocess.run(["ip", "netns", "del", name], check=True)
    assert made == [
        f"+ network namespaces: {name}",
        f"+ links: {name}a",
        f"+ mounts: /run/netns/{name} nsfs",
    ]
    assert _mine(leaks.difference(before, leaks.take()), name) == []
