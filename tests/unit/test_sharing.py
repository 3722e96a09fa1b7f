"""Two sweeps on one machine: each enters the machine's list of running sweeps (a lock
held while it runs) and the second is told about the first, by pid and command; a sweep
that died is not counted, and its entry is removed (by clean, and by the next sweep)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from experiments.run import launch
from testbed.ownership import OwnerLock, remove_dead_sweep_entries

HOLDER = textwrap.dedent(
    """
    import sys, time
    from experiments.run import launch
    entry, others = launch.enter_sweep()
    print(len(others), flush=True)
    time.sleep(60)
    """
)


def test_a_second_sweep_hears_of_the_first_and_not_of_a_dead_one(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETB_REGISTRY", str(tmp_path / "runs"))
    repo = Path(__file__).resolve().parents[2]
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, "--out", "elsewhere"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=repo,
    )
    try:
        assert first.stdout is not None and first.stdout.readline() == "0\n"
        entry, others = launch.enter_sweep()
        assert entry is not None and [h["pid"] for h in others] == [first.pid]
        warning = launch.sharing_warning(others)
        assert warning is not None and f"pid {first.pid}" in warning and "elsewhere" in warning
        launch.leave_sweep(entry)
    finally:
        first.kill()
        first.wait()
    # the first died without leaving (kill -9): `clean` removes its entry, a live one stays
    dead = launch.sweeps_dir() / f"{first.pid}.lock"
    live = launch.sweeps_dir() / "live.lock"
    holder = OwnerLock(live)
    assert holder.acquire(blocking=False)
    assert remove_dead_sweep_entries() == [dead] and live.exists()
    holder.release()
    dead.touch()  # and the next sweep's start removes it too, and does not count it
    entry, others = launch.enter_sweep()
    assert entry is not None and others == [] and launch.sharing_warning(others) is None
    assert sorted(p.name for p in launch.sweeps_dir().iterdir()) == [entry.path.name]
    launch.leave_sweep(entry)
    assert list(launch.sweeps_dir().iterdir()) == []
