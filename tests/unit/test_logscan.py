"""Every node's log read (testbed.cassandra.logscan): the lines cassandra-dtest looks
for, each allowed with its reason or unexpected; allowances for faults only where the
cluster's nodes were taken down on purpose."""

from pathlib import Path
from typing import Any

from testbed.cassandra import logscan

LOG = """INFO  [main] 2026-11-28 03:00:00,000 CassandraDaemon.java:1 - Startup complete
WARN  [GossipTasks:1] 2026-11-28 03:00:01,000 Gossiper.java:1 - Not marking nodes down
ERROR [Messaging-EventLoop-3-1] 2026-11-28 03:00:02,000 OutboundConnection.java:1 - failed
java.io.IOException: Connection reset by peer
\tat sun.nio.ch.SocketDispatcher.read0(Native Method)
ERROR [CompactionExecutor:1] 2026-11-28 03:00:03,000 CassandraDaemon.java:1 - Exception
java.lang.AssertionError: null
Caused by: java.lang.IllegalStateException: broken invariant
"""


def test_problem_lines_are_found_and_judged(tmp_path):
    path = tmp_path / "system.log"
    path.write_text(LOG)
    plain = logscan.scan({"e0": path})
    # two records: an ERROR with its exception, an ERROR with its exception and cause,
    # each shown with them
    assert [f.line.split(" - ")[-1] for f in plain] == [
        "failed | java.io.IOException: Connection reset by peer",
        "Exception | java.lang.AssertionError: null | Caused by: "
        "java.lang.IllegalStateException: broken invariant",
    ]
    assert all(f.allowed is None for f in plain)  # no fault: nothing is expected
    faulted = logscan.scan({"e0": path}, faults=True)
    assert faulted[0].allowed and "fault" in faulted[0].allowed  # a reset connection
    assert logscan.unexpected(faulted) == [faulted[1]]  # the assertion stays unexpected
    summary = logscan.summary(faulted)
    assert summary["unexpected"] == 1 and summary["lines"][0].startswith("e0: ERROR [Compaction")
    # from a mark: only what was written since
    marks = logscan.sizes({"e0": path})
    with open(path, "a") as f:
        f.write("ERROR [main] 2026-11-28 03:00:04,000 X.java:1 - later\n")
    (later,) = logscan.scan({"e0": path, "e9": tmp_path / "missing.log"}, marks)
    assert later.line.endswith("- later")


def test_every_bring_up_here_logs_a_refused_internode_connection_allowed_as_such():
    """Nodes start together: one tries a peer's port 7000 before it listens (seen in the
    first sweep that read every log: two such lines per 3-node bring-up)."""
    line = (
        "io.netty.channel.AbstractChannel$AnnotatedConnectException: finishConnect(..) "
        "failed: Connection refused: /10.77.0.12:7000"
    )
    (found,) = logscan.classify("e0", line)
    assert found.allowed and "before that peer listened" in found.allowed


def test_the_journal_keeps_one_line_per_cluster_and_is_read_from_an_offset(tmp_path):
    import pytest

    from common.files import UnsafeFileError

    path = tmp_path / "system.log"
    path.write_text(LOG)
    assert logscan.journal_since(tmp_path, 0) == ([], 0)  # no cluster torn down yet
    logscan.journal(tmp_path, "aaa111", logscan.scan({"e0": path}), faulted=False)
    first, offset = logscan.journal_since(tmp_path, 0)
    assert [(ln["run_id"], ln["faulted"], ln["unexpected"]) for ln in first] == [
        ("aaa111", False, 2)
    ]
    assert (tmp_path / logscan.JOURNAL).stat().st_mode & 0o777 == 0o600
    logscan.journal(tmp_path, "bbb222", logscan.scan({"e0": path}, faults=True), faulted=True)
    with open(tmp_path / logscan.JOURNAL, "a") as f:
        f.write('{"run_id": "half')  # a line being written: read the next time
    later, end = logscan.journal_since(tmp_path, offset)
    assert [(ln["run_id"], ln["unexpected"]) for ln in later] == [("bbb222", 1)]
    assert later[0]["allowed"] and end < (tmp_path / logscan.JOURNAL).stat().st_size
    # never written through a link planted in its place
    other = tmp_path / "other"
    other.mkdir()
    (other / logscan.JOURNAL).symlink_to(tmp_path / "target")
    with pytest.raises(UnsafeFileError):
        logscan.journal(other, "ccc333", [], faulted=False)
    assert not (tmp_path / "target").exists()


def test_logs_read_on_their_hosts_are_judged_alike():
    """The hosts and libvirt backends read a node's log on its host (tail -c); the text
    is judged as a local file is."""
    assert logscan.remote_tail_argv(Path("/r/nodes/e0/logs/system.log")) == [
        "tail", "-c", str(logscan.MAX_BYTES), "/r/nodes/e0/logs/system.log",
    ]  # fmt: skip
    found = logscan.scan_texts({"e0": LOG, "e1": ""}, faults=True)
    assert [(f.node, f.allowed is None) for f in found] == [("e0", False), ("e0", True)]


def test_an_internode_connection_timing_out_is_expected_only_under_a_fault():
    text = (
        "INFO  [Messaging-EventLoop-3-1] 2026-11-28 12:20:00,000 NoSpamLogger.java:1 - "
        "e0 failed to connect\n"
        "io.netty.channel.ConnectTimeoutException: connection timed out after 2000 ms: "
        "/10.77.0.13:7000\n"
    )
    (plain,) = logscan.scan_texts({"e0": text})
    (faulted,) = logscan.scan_texts({"e0": text}, faults=True)
    assert plain.allowed is None and faulted.allowed and "fault" in faulted.allowed


def test_a_remote_testbed_reads_each_nodes_log_on_its_host(tmp_path):
    """Testbed._scan_logs on a backend of remote hosts: each node's log is read through
    the backend's command (here a tail standing in for SSH, reading "the host's" copy:
    nothing is at the node's path on this machine), a host that cannot be read counts as
    no lines and the others are still judged."""
    from types import SimpleNamespace

    from testbed.testbed import Testbed

    (tmp_path / "e0").mkdir()
    (tmp_path / "e0" / "system.log").write_text(LOG)  # on "the host", not at the path here

    class Backend:
        def exec_argv(self, host, argv, *, limited=True):
            assert argv[:2] == ["tail", "-c"] and not limited
            if host == "e1":
                return ["false"]  # an unreachable host
            return ["tail", "-c", argv[2], str(tmp_path / host / "system.log")]

    tb = Testbed.__new__(Testbed)
    tb.backend_name = "hosts"
    nodes: dict[str, Any] = {
        "e0": SimpleNamespace(system_log=tmp_path / "absent" / "e0.log"),
        "e1": SimpleNamespace(system_log=tmp_path / "absent" / "e1.log"),
    }
    tb.nodes = nodes
    found = tb._scan_logs(Backend(), faulted=False)  # type: ignore[arg-type]
    assert [(f.node, f.allowed) for f in found] == [("e0", None), ("e0", None)]


def test_logs_read_on_the_nodes_hosts_are_kept_as_files(tmp_path):
    """A failed start on remote hosts keeps what was read there (the local node
    directories of a remote run hold no log); a log that could not be read is none."""
    logscan.save_texts({"e0": "INFO boot\nERROR x\n", "e1": ""}, tmp_path / "kept")
    assert (tmp_path / "kept" / "e0" / "system.log").read_text() == "INFO boot\nERROR x\n"
    assert not (tmp_path / "kept" / "e1").exists()
