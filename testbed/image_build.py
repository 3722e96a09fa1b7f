"""Build the VM base image (``testbed.images``) from package registries only; cached.

    python -m testbed image build

debootstrap and every chroot step run in a mount and PID namespace of their own
(``isolated``): the /proc, /sys and /dev they mount inside the build root are never
visible on the host and vanish with the namespace, and a build killed even by kill -9
takes every process of its step with it. So a killed build never leaves a mount under
the cache, and the host-visible tree can be deleted safely.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from common.errors import CommandError, ConfigError, StateError
from common.keyed_cache import input_key, publish

from .cassandra import dist as dist_mod
from .cassandra import quiet
from .images import (
    DEFINITION,
    GUEST_PYTHON,
    GUEST_VENV,
    GUEST_WHEELS,
    IMAGE_SIZE,
    MASKED_UNITS,
    SUITE,
    NodeImage,
    image_root,
    inputs,
    load,
    read_packages,
)


def _mirror() -> str:
    """The Debian mirror apt on this host uses (the only place packages can come from)."""
    d = Path("/etc/apt/sources.list.d")
    for path in [
        Path("/etc/apt/sources.list"),
        *sorted(d.glob("*.sources")),
        *sorted(d.glob("*.list")),
    ]:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            words = line.split()
            if (
                line.startswith("URIs:")
                and len(words) > 1
                and "debian" in words[1]
                and "security" not in words[1]
            ):
                return words[1]
            if words[:1] == ["deb"] and "debian" in line and "security" not in line:
                return next(w for w in words[1:] if not w.startswith("["))
    return "http://deb.debian.org/debian"


# PID 1 of a step's namespace: runs the step as its child and exits with its status. The
# step must not be PID 1 itself: the kernel clears a process's parent-death signal when
# it changes credentials, and apt-get does, so an apt-get that was PID 1 outlived a
# killed build (measured) and kept its namespace, and with it the build's mounts, alive.
STEP_INIT = '"$@"\nexit $?'


def isolated(argv: Sequence[str]) -> list[str]:
    """``argv`` in a private mount namespace and a PID namespace of its own (pure).

    Mounts made inside never reach the host and are dropped by the kernel when the
    namespace's last process exits. setpriv gives unshare a parent-death signal, so the
    step dies with the build process even when that is killed with SIGKILL; unshare's
    --kill-child then kills the namespace's PID 1 (a shell that only waits for the step),
    and the kernel every other process in the namespace (dpkg, maintainer scripts).
    """
    return [
        "setpriv",
        "--pdeathsig",
        "KILL",
        "--",
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--fork",
        "--kill-child",
        "--",
        "sh",
        "-c",
        STEP_INIT,
        "edgetb-step",
        *argv,
    ]


# Runs inside the namespace: $1 is the build root, the rest the command for the chroot.
# Nothing here is unmounted: the mounts end with the namespace.
CHROOT_SCRIPT = """set -e
root=$1
shift
mkdir -p "$root/proc" "$root/sys" "$root/dev"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
exec chroot "$root" "$@"
"""

CHROOT_ENV = {
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "DEBIAN_FRONTEND": "noninteractive",
    "LC_ALL": "C",
    "HOME": "/root",
}


def chroot_command(root: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside ``root`` with /proc, /sys and /dev mounted for apt's maintainer
    scripts, all in a namespace of its own (pure)."""
    return isolated(["sh", "-c", CHROOT_SCRIPT, "edgetb-chroot", str(root), *argv])


def _chroot(root: Path, argv: list[str], timeout: float = 1800) -> None:
    _step(chroot_command(root, argv), timeout=timeout, env=CHROOT_ENV)


def build(*, force: bool = False, progress=print) -> NodeImage:
    """Build (or reuse) the VM base image; returns it."""
    if os.geteuid() != 0:
        raise ConfigError("building the VM image needs root (debootstrap, chroot)")
    for tool in ("debootstrap", "mkfs.ext4", "qemu-img", "unshare", "setpriv"):
        if not shutil.which(tool):
            raise ConfigError(f"{tool} is missing: `make vms` installs it")
    dist = dist_mod.install(progress=progress)
    quiet.install(dist, progress=progress)
    packages = read_packages()
    spec = inputs(dist)
    key = input_key(spec)
    target = image_root() / key
    image_root().mkdir(parents=True, exist_ok=True)
    with _build_lock(progress):  # a build in progress finishes first (maybe this very key)
        _remove_stale_builds(progress)
        if not force and (target / "manifest.json").is_file():
            publish(image_root(), key)
            progress(f"VM image: {target} (cached)")
            return load()
        build_s = _build(target, spec, dist, packages, progress)
        publish(image_root(), key)
    image = load()
    progress(
        f"VM image: {image.root} (base.qcow2 {image.disk.stat().st_size >> 20} MB) "
        f"built in {build_s:.0f} s"
    )
    return image


def _build(
    target: Path,
    spec: dict,
    dist: dist_mod.CassandraDist,
    packages: dict[str, list[str]],
    progress,
) -> float:
    """Build the image of ``spec`` into ``target``; returns the build's duration in s."""
    key = target.name
    t0 = time.monotonic()
    progress(f"building the VM image (Debian {SUITE}, Cassandra {dist.version}); about 2 min")
    work = Path(tempfile.mkdtemp(dir=image_root(), prefix=".build-"))
    try:
        rootfs = _root_file_system(work, dist, packages, progress)
        staging = _disk_image(work, rootfs, progress)
        build_s = time.monotonic() - t0
        (staging / "manifest.json").write_text(
            json.dumps(
                {
                    **spec,
                    "key": key,
                    "build_s": round(build_s, 1),
                    "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                },
                indent=1,
            )
        )
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        _remove_build_dir(work)
    return build_s


def _root_file_system(
    work: Path, dist: dist_mod.CassandraDist, packages: dict[str, list[str]], progress
) -> Path:
    """The guest's root in ``work``: Debian by debootstrap, its packages, the guest venv
    from PyPI's wheels (checked), Cassandra's jars; returns its directory."""
    rootfs = work / "rootfs"
    wheels = work / "wheels"
    progress("  downloading wheels from PyPI: " + ", ".join(GUEST_WHEELS))
    _step(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "-d",
            str(wheels),
            *GUEST_WHEELS,
        ],
        timeout=900,
    )
    progress(f"  debootstrap {SUITE} ({len(packages['debootstrap'])} packages)")
    # debootstrap mounts /proc and /sys inside the new root itself (and unmounts them
    # only when it exits normally): isolated too.
    _step(
        isolated(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=" + ",".join(packages["debootstrap"]),
                SUITE,
                str(rootfs),
                _mirror(),
            ]
        ),
        timeout=3600,
    )
    _configure(rootfs)
    progress("  apt-get install " + " ".join(packages["apt"]))
    _chroot(rootfs, ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages["apt"]])
    _chroot(rootfs, ["apt-get", "clean"])
    _guest_venv(rootfs, wheels, progress)
    (rootfs / "etc/resolv.conf").write_text("")
    progress(f"  Cassandra {dist.version} at {dist.root}")
    shutil.copytree(
        dist.root,
        rootfs / str(dist.root).lstrip("/"),
        symlinks=True,
        ignore=shutil.ignore_patterns("cds"),
    )
    return rootfs


def _guest_venv(rootfs: Path, wheels: Path, progress) -> None:
    """The guest's venv from the wheels downloaded on the host (installed offline), and
    what the libvirt backend's provisioning no longer checks in each TCG guest (seconds
    of emulated Python each): tcconfig answers and the driver imports."""
    progress("  guest venv: " + ", ".join(GUEST_WHEELS))
    shutil.copytree(wheels, rootfs / "tmp" / "wheels")
    _chroot(rootfs, ["python3", "-m", "venv", GUEST_VENV])
    _chroot(
        rootfs,
        [
            GUEST_PYTHON,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--find-links",
            "/tmp/wheels",
            *GUEST_WHEELS,
        ],
    )
    shutil.rmtree(rootfs / "tmp" / "wheels")
    _chroot(rootfs, [f"{GUEST_VENV}/bin/tcset", "--version"])
    _chroot(rootfs, [GUEST_PYTHON, "-c", "import cassandra, yaml"])


def _disk_image(work: Path, rootfs: Path, progress) -> Path:
    """The boot files and the qcow2 disk of ``rootfs`` in ``work``/image (host keys left
    out: made per VM at first boot); returns that directory."""
    staging = work / "image"
    staging.mkdir()
    boot = rootfs / "boot"
    shutil.copy(next(boot.glob("vmlinuz-*")), staging / "vmlinuz")
    shutil.copy(next(boot.glob("initrd.img-*")), staging / "initrd.img")
    for keyfile in (rootfs / "etc" / "ssh").glob("ssh_host_*"):
        keyfile.unlink()  # made per VM at first boot
    progress("  file system -> qcow2")
    raw = work / "root.ext4"
    # Inode tables and journal written now: a lazily initialised ext4 fills every new
    # overlay with ~100 MB of background writes during the VM's first minute.
    _step(
        [
            "mkfs.ext4",
            "-q",
            "-L",
            "edgetb-root",
            "-E",
            "lazy_itable_init=0,lazy_journal_init=0",
            "-d",
            str(rootfs),
            str(raw),
            IMAGE_SIZE,
        ],
        timeout=1800,
    )
    _step(
        ["qemu-img", "convert", "-O", "qcow2", str(raw), str(staging / "base.qcow2")],
        timeout=1800,
    )
    raw.unlink()
    return staging


def _configure(rootfs: Path) -> None:
    """Files of the definition into the new root, before the kernel (and its initrd)."""
    d = DEFINITION
    (rootfs / "etc/initramfs-tools/conf.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/initramfs-tools/conf.d/edgetb").write_text("MODULES=list\nCOMPRESS=gzip\n")
    shutil.copy(d / "initramfs-modules", rootfs / "etc/initramfs-tools/modules")
    sbin = rootfs / "usr/local/sbin/edgetb-firstboot"
    shutil.copy(d / "edgetb-firstboot.sh", sbin)
    sbin.chmod(0o755)
    unit_dir = rootfs / "etc/systemd/system"
    shutil.copy(d / "edgetb-firstboot.service", unit_dir / "edgetb-firstboot.service")
    wants = unit_dir / "multi-user.target.wants"
    wants.mkdir(exist_ok=True)
    link = wants / "edgetb-firstboot.service"
    if not link.exists():
        link.symlink_to("/etc/systemd/system/edgetb-firstboot.service")
    # Jobs a measurement VM must not run on its own: e2scrub_reap at every boot (17 s of
    # a TCG boot's CPU), and timers that would wake inside a cell (apt's among them).
    for unit in MASKED_UNITS:
        mask = unit_dir / unit
        mask.unlink(missing_ok=True)
        mask.symlink_to("/dev/null")
    (rootfs / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    shutil.copy(d / "sshd_config.conf", rootfs / "etc/ssh/sshd_config.d/edgetb.conf")
    (rootfs / "etc/fstab").write_text("LABEL=edgetb-root / ext4 defaults,noatime 0 1\n")
    (rootfs / "etc/hostname").write_text("edgetb\n")
    # apt needs a resolver during the build only (emptied afterwards: a testbed VM talks
    # to its own subnet and nothing else).
    (rootfs / "etc/resolv.conf").unlink(missing_ok=True)
    shutil.copy("/etc/resolv.conf", rootfs / "etc/resolv.conf")


def _step(argv: list[str], *, timeout: float, env: dict[str, str] | None = None) -> None:
    """Run one build step in its own process group: on failure, timeout or Ctrl-C every
    process it started (debootstrap's dpkg, apt's maintainer scripts) is killed with it."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise CommandError(argv, proc.returncode, out[-4000:], "")


@contextlib.contextmanager
def _build_lock(progress) -> Iterator[None]:
    """Hold the image cache's build lock (one build at a time; waits for a running one).
    The kernel releases it when the holder dies, even by kill -9."""
    with open(image_root() / ".build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another VM image build is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _remove_stale_builds(progress) -> None:
    """Delete the build directories of killed builds (called holding the build lock, so
    none of them belongs to a live build)."""
    for stale in sorted(image_root().glob(".build-*")):
        if stale.is_dir() and not stale.is_symlink():
            progress(f"  removing {stale} (left by a build that was killed)")
            _remove_build_dir(stale)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/mounts") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def _remove_build_dir(work: Path) -> None:
    """Unmount whatever is mounted inside ``work`` on the host (nothing, since the build
    mounts only inside its namespaces; kept as a guard, e.g. for a build root an older
    builder left), then delete it. Never deletes through a mount point."""
    for point in _mounts_under(work):
        subprocess.run(["umount", "-l", point], capture_output=True)
    left = _mounts_under(work)
    if left:
        raise StateError(f"cannot remove {work}: still mounted: {', '.join(left)}")
    shutil.rmtree(work, ignore_errors=True)
