"""VM image build steps: debootstrap and the chroot run in namespaces of their own, so a
killed build leaves no /proc, /sys or /dev mounted under the cache."""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import image_build, images

PREFIX = image_build.isolated([])


def test_isolated_wraps_a_command_in_its_own_mount_and_pid_namespace():
    argv = ["debootstrap", "--variant=minbase", "bookworm", "/r o o t"]
    cmd = image_build.isolated(argv)
    assert cmd[: cmd.index("--") + 1] == ["setpriv", "--pdeathsig", "KILL", "--"]
    unshare = cmd[cmd.index("--") + 1 : cmd.index("sh")]
    assert unshare[0] == "unshare" and unshare[-1] == "--"
    for option in ("--mount", "--pid", "--fork", "--kill-child"):
        assert option in unshare
    assert unshare[unshare.index("--propagation") + 1] == "private"
    assert cmd[len(PREFIX) :] == argv  # the command itself, untouched


def test_the_namespace_init_runs_the_step_and_returns_its_status(tmp_path):
    init = PREFIX[PREFIX.index("sh") :]  # what runs as PID 1 inside the namespace
    out = subprocess.run(
        [*init, "sh", "-c", 'printf "%s|" "$@"; exit 7', "step", "a b", "$HOME"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 7 and out.stdout == "a b|$HOME|"


def fake_tools(tmp_path: Path, failing: str = "") -> tuple[Path, dict]:
    """`mount` and `chroot` that log their arguments (one tab-separated line per call);
    a mount whose arguments contain ``failing`` exits 32."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for name in ("mount", "chroot"):
        tool = bin_dir / name
        tool.write_text(
            "#!/bin/sh\n"
            f'{{ printf "%s" {name}; for a in "$@"; do printf "\\t%s" "$a"; done; echo; }}'
            f" >> {log}\n" + (f'case "$*" in *{failing}*) exit 32;; esac\n' if failing else "")
        )
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return log, env


def calls(log: Path) -> list[list[str]]:
    return [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []


def test_the_chroot_step_mounts_inside_then_runs_the_command(tmp_path):
    root = tmp_path / "build root"
    root.mkdir()
    argv = ["apt-get", "install", "-y", "a package with spaces"]
    cmd = image_build.chroot_command(root, argv)
    assert cmd[: len(PREFIX)] == PREFIX  # all of it inside the namespace
    log, env = fake_tools(tmp_path)
    proc = subprocess.run(cmd[len(PREFIX) :], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    r = str(root)
    assert calls(log) == [
        ["mount", "-t", "proc", "proc", f"{r}/proc"],
        ["mount", "-t", "sysfs", "sys", f"{r}/sys"],
        ["mount", "--bind", "/dev", f"{r}/dev"],
        ["mount", "--bind", "/dev/pts", f"{r}/dev/pts"],
        ["chroot", r, *argv],
    ]
    assert all((root / d).is_dir() for d in ("proc", "sys", "dev"))


def test_the_chroot_step_stops_at_a_failed_mount(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    log, env = fake_tools(tmp_path, failing="sysfs")
    cmd = image_build.chroot_command(root, ["true"])
    proc = subprocess.run(cmd[len(PREFIX) :], env=env, capture_output=True, text=True)
    assert proc.returncode == 32
    assert [c[0] for c in calls(log)] == ["mount", "mount"]  # proc, then the failed sysfs


def processes_with(token: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if token.encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def mount_points() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4] for line in f}


@pytest.mark.root
def test_an_isolated_mount_stays_private_and_dies_with_a_killed_builder(tmp_path):
    """A stand-in builder starts an isolated step that mounts a tmpfs, then changes its
    credentials (as apt-get does, which clears a process's parent-death signal) and
    sleeps; the builder is killed with SIGKILL: the host never sees the mount, and the
    step's processes are gone right after."""
    target = tmp_path / "rootfs-proc"
    target.mkdir()
    ready = tmp_path / "ready"
    # A sleep of a duration nothing else uses: every process of the step (the shell and
    # the sleep inside the namespace, unshare outside) carries it on its command line.
    token = f"1000.{time.monotonic_ns() % 10**9:09d}"
    step = image_build.isolated(
        [
            "sh",
            "-c",
            f"mount -t tmpfs edgetb-test {target} && touch {target}/inside && touch {ready} "
            f"&& exec setpriv --regid=65534 --clear-groups sleep {token}",
        ]
    )
    builder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, time; subprocess.Popen({step!r}); time.sleep(120)",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert time.monotonic() < deadline, "the isolated step did not start"
            time.sleep(0.05)
        assert processes_with(token)  # builder, unshare, the namespace's init, the sleep
        assert str(target) not in mount_points()  # the step's mount is not the host's
        assert not (target / "inside").exists()
        builder.send_signal(signal.SIGKILL)
        builder.wait()
        deadline = time.monotonic() + 5
        while processes_with(token) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(token) == []
        assert str(target) not in mount_points()
    finally:
        if builder.poll() is None:
            builder.kill()
            builder.wait()
        for pid in processes_with(token):  # only this test's own processes carry the token
            os.kill(pid, signal.SIGKILL)
        if str(target) in mount_points():  # isolation failed: do not leave the mount behind
            subprocess.run(["umount", "-l", str(target)], check=False)


def test_a_new_build_removes_what_killed_builds_left_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETB_CACHE", str(tmp_path))
    root = images.image_root()
    (root / ".build-killed1" / "rootfs" / "etc").mkdir(parents=True)
    (root / ".build-killed1" / "rootfs" / "etc" / "hostname").write_text("edgetb\n")
    (root / "0123456789abcdef").mkdir()
    (root / "current").symlink_to("0123456789abcdef")
    said: list[str] = []
    image_build._remove_stale_builds(said.append)
    assert sorted(p.name for p in root.iterdir()) == ["0123456789abcdef", "current"]
    assert len(said) == 1 and ".build-killed1" in said[0]


def test_builds_take_turns_on_one_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETB_CACHE", str(tmp_path))
    root = images.image_root()
    root.mkdir(parents=True)
    holder = subprocess.Popen(  # another build: holds the lock until its stdin closes
        [
            sys.executable,
            "-c",
            "import fcntl, sys\n"
            f"f = open({str(root / '.build.lock')!r}, 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('holding', flush=True); sys.stdin.read(); print('done', flush=True)",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    with holder:
        try:
            stdin, stdout = holder.stdin, holder.stdout
            assert stdin is not None and stdout is not None
            assert stdout.readline() == b"holding\n"
            said: list[str] = []

            def waiting(message: str) -> None:
                said.append(message)
                stdin.close()  # the other build finishes while this one waits

            with image_build._build_lock(waiting):
                # taken once the other build let go: it said "done" before it exited
                assert select.select([stdout], [], [], 0)[0]
                assert stdout.readline() == b"done\n"
            assert said == ["another VM image build is running; waiting for it"]
            assert holder.wait(5) == 0
        finally:
            holder.kill()


def test_publishing_at_once_never_fails(tmp_path):
    """Two workers set up on one machine publish the cached gateway image together: a
    shared temporary link name made one of them fail (FileNotFoundError on the rename)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from common.keyed_cache import publish

    key = "a" * 16
    (tmp_path / key).mkdir()
    barrier = threading.Barrier(8)
    for _ in range(100):
        (tmp_path / "current").unlink(missing_ok=True)
        (tmp_path / "current").symlink_to("b" * 16)  # an older build was current

        def at_once(_: int) -> None:
            barrier.wait()
            publish(tmp_path, key)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(at_once, range(8)))
        assert os.readlink(tmp_path / "current") == key
    assert not list(tmp_path.glob(".current.*"))
