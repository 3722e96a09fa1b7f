"""`make test`'s runner (tests/support/suite.py): how its two sessions' exit codes make
the suite's, and which tests each session gets."""

import signal

from tests.support import suite


def test_a_failure_in_either_session_fails_the_suite_and_an_empty_one_does_not():
    assert suite.combined(0, 0) == 0
    assert suite.combined(0, suite.NO_TESTS) == 0  # -k left the VM session empty
    assert suite.combined(suite.NO_TESTS, 0) == 0
    assert suite.combined(1, 0) == 1 and suite.combined(0, 1) == 1
    assert suite.combined(2, 1) == 2  # the main session's first (interrupted: 2)
    assert suite.combined(suite.NO_TESTS, suite.NO_TESTS) == suite.NO_TESTS


def test_the_vm_tests_run_in_their_session_only():
    for path in [*suite.VM_TESTS, *suite.BESIDE]:
        assert (suite.ROOT / path).is_file(), path  # a renamed module is not lost
        assert f"--ignore={path}" in suite.REST


def test_arguments_that_name_tests_run_those_alone_and_options_go_to_both_sessions():
    assert suite.named_tests(["-x", "-k", "ownership"]) == []
    assert suite.named_tests(["-k", "tests"]) == []  # an expression, though a directory
    assert suite.named_tests(["tests/unit", "-x"]) == ["tests/unit"]
    named = "tests/unit/test_suite_runner.py::test_the_vm_tests_run_in_their_session_only"
    assert suite.named_tests(["-q", named]) == [named]
    assert suite.named_tests(["tests/no_such_file.py"]) == []  # pytest's own error then


def test_a_failed_sessions_failures_are_printed_again_at_the_end(tmp_path, capsys):
    # two real pytest sessions side by side, one failing: CI shows only the output's
    # tail, where the VM session's lines would otherwise hide which test failed
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_bad.py").write_text("def test_red():\n    assert 1 == 2\n")
    (tmp_path / "test_good.py").write_text("def test_green():\n    pass\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    own = ["-ra", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-c",
           str(tmp_path / "pytest.ini")]  # fmt: skip
    sessions = [
        ("", [*own, str(tmp_path / "test_good.py")], env),
        ("p| ", [*own, str(tmp_path / "test_bad.py")], env),
        # -q prints no closing "=== ... in Xs ===": its last lines stand in
        ("q| ", [*own, "-q", str(tmp_path / "test_bad.py")], env),
    ]
    summaries: dict[str, list[bytes]] = {}
    handler = signal.getsignal(signal.SIGINT)
    codes = suite._run_side_by_side(sessions, summaries, tmp_path)
    assert signal.getsignal(signal.SIGINT) is handler  # Ctrl-C is the caller's again
    assert codes == {"": 0, "p": 1, "q": 1}
    capsys.readouterr()
    suite._print_failures({"q": 1}, summaries)
    quiet = capsys.readouterr().out
    assert "suite: q| (no closing count; its last lines:)" in quiet and "1 failed" in quiet
    suite._print_failures({k: v for k, v in codes.items() if k != "q"}, summaries)
    tail = capsys.readouterr().out.splitlines()
    assert tail[0] == "suite: what the p session reported failing (exit 1):"
    assert tail[1].startswith("suite: p| FAILED ") and "test_bad.py::test_red" in tail[1]
    assert "1 failed" in tail[-1] and tail[-1].startswith("suite: p| ="), tail
    assert not [line for line in tail if "test_green" in line]  # only the failed session
    # each session's whole output kept, unprefixed
    assert "test_good.py ." in (tmp_path / "main.log").read_text()
    assert "def test_red" in (tmp_path / "p.log").read_text()
