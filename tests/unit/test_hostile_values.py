"""A search for tracebacks, not a table of known cases (issue 42, item 5): every option of
``edgetb sweep`` (with ``--dry-run``: nothing is measured) and of ``edgetb model
predict`` (but its ``--out``) gets each of a list of hostile values, as a tired user or
an attacker would type them. Each run must end as a command should: accepted (exit 0)
or refused in one line (exit 2), never with a traceback or another exit, and nothing
appears in the results directory a run names (a relative one: in the child's own empty
working directory). Dry runs only: they skip the probes of --scheduler and --workers.
Its first run found 16 runs that ended in exit 1 printing a name of 5000 characters
whole (a path the file system cannot take: now a bad input, its name cut).

The options come from the parsers themselves, so a new option is searched without
anyone listing it. The runs go through one child process (``main(argv)`` per case; a
subprocess each would take minutes) that reports each case as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIG = "9" * 400
HOSTILE = [
    "", " ", "0", "-1", "-0", "1.5", "nan", "inf", "-inf", "1e309", BIG, "-" + BIG, "0x10",
    "1,,2", ",", "1..", "..", "1..3..5", "5..1", "../../etc/passwd", "/dev/zero", "/",
    "a" * 5000, "{{ lookup('pipe', 'id') }}", "é€😀", "1;id", "%s%n", "None", "[1, 2]",
    "tls://", "tcp://[::1", "e0,e0", "*",
]  # fmt: skip
# run in the child: every (command, argv) case, its exit code and output as JSON lines
CHILD = r"""
import contextlib, json, sys, tempfile, traceback
from analysis import model as model_cmd
from experiments import sweep
cases = json.loads(sys.stdin.read())
for name, argv in cases:
    main = sweep.main if name == "sweep" else model_cmd.main
    # files, not StringIO: what a real stream has (Ansible reconfigures stderr)
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - what the search looks for
        code = "traceback"
        err.write(traceback.format_exc())
    err.seek(0)
    print(json.dumps([name, argv, code, err.read()[-3000:]]), flush=True)
    out.close(), err.close()
"""


def _options(parser) -> list[str]:
    """The long options of ``parser`` that take a value."""
    return sorted(
        max(a.option_strings, key=len)
        for a in parser._actions
        if a.option_strings and a.nargs != 0 and "--help" not in a.option_strings
    )


def _cases(tmp: Path) -> list[tuple[str, list[str]]]:
    from analysis import model as model_cmd
    from experiments import sweep

    out = str(tmp / "out")
    cases = []
    for option in _options(sweep.parser()):
        for value in HOSTILE:
            argv = [option, value] if option != "--out" else []
            cases.append(("sweep", [*argv, "--dry-run", "--out", value if not argv else out]))
    # predict writes its plot into --out: a hostile --out is the sweep's, searched above
    for option in _options(model_cmd._predict_parser()):
        for value in HOSTILE if option != "--out" else []:
            cases.append(("model", ["predict", option, value]))
    return cases


def test_no_value_of_any_option_ends_in_a_traceback(tmp_path):
    cases = _cases(tmp_path)
    assert len(cases) > 1000  # every option searched, not a handful
    # in a directory of its own: a relative --out (0, None, *) lands there, not in the repo
    work = tmp_path / "cwd"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(cases), cwd=work,
                          capture_output=True, text=True, timeout=900,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "PYTHONPATH": str(ROOT),
                               "EDGETB_HOME": str(tmp_path / "home")})  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(results) == len(cases), proc.stderr[-3000:]
    bad = []
    for name, argv, code, err in results:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        if code == 0:
            continue
        if code != 2 or len(lines) != 1 or "Traceback" in err:
            bad.append(f"{name} {argv[:2]!r}: exit {code}: {err.strip()[-600:]}")
    assert not bad, f"{len(bad)} of {len(cases)} runs:\n" + "\n".join(bad[:40])
    assert not (tmp_path / "out").exists()  # a dry run makes no results directory
    assert not any(work.iterdir()), sorted(p.name for p in work.iterdir())
