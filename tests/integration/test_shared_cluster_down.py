"""Right after the shared cluster's last other user (tests/integration/conftest.py orders
it there): tearing it down leaves nothing of it behind."""

import os

from testbed.ownership import LOCK_FILE

from .conftest import assert_no_residue


def _locks_on(inode: int) -> list[str]:
    with open("/proc/locks") as f:
        return [line for line in f if f":{inode} " in line]


def test_down_leaves_no_namespace_process_file_or_lock(cluster):
    run_id = cluster.run_id
    run_dir = cluster.state.run_dir
    inode = os.stat(run_dir / LOCK_FILE).st_ino
    pids = [n.pid for n in cluster.nodes.values()]
    assert all(os.path.exists(f"/proc/{p}") for p in pids)
    cluster.down()
    assert_no_residue(run_id)
    assert not run_dir.exists()
    assert _locks_on(inode) == []
    for pid in pids:  # gone, or at most a zombie awaiting its reaper
        try:
            with open(f"/proc/{pid}/stat") as f:
                assert f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            pass
    cluster.down()  # idempotent
