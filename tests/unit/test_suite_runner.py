"""`make test`'s runner (tests/support/suite.py): how its two sessions' exit codes make
the suite's, and which tests each session gets."""

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
