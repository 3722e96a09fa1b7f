"""A test session's node logs of failed runs are moved out of its temporary home before
it is removed; the newest sessions' are kept, older ones dropped."""

import os

from tests.support.kept_logs import keep_logs


def test_logs_move_out_and_only_the_newest_sessions_stay(tmp_path):
    into = tmp_path / "kept"
    assert keep_logs(tmp_path / "no-logs", into) is None and not into.exists()
    for i in range(4):
        home = tmp_path / f"edgetb-tests-{i}"
        (home / "logs" / "cfa2ff").mkdir(parents=True)
        (home / "logs" / "cfa2ff" / "e0.log").write_text(f"ERROR {i}\n")
        target = keep_logs(home, into, keep=2)
        assert target is not None and target == into / home.name
        assert not (home / "logs").exists()
        assert (target / "cfa2ff" / "e0.log").read_text() == f"ERROR {i}\n"
        os.utime(target, (1000 + i, 1000 + i))
    assert sorted(p.name for p in into.iterdir()) == ["edgetb-tests-2", "edgetb-tests-3"]
    empty = tmp_path / "edgetb-tests-empty"
    (empty / "logs").mkdir(parents=True)
    assert keep_logs(empty, into) is None  # nothing failed: nothing kept
