"""Build the VM base image (edge nodes and endpoint) from package registries only; cached.

    python -m testbed image build

The definition lives in ``vm-images/node/`` (package list, first-boot script and unit,
sshd settings, initramfs modules); this module turns it into

- ``base.qcow2``: a Debian 12 root file system (debootstrap, then apt-get inside it) with
  openjdk-17-jre-headless, python3, a venv at /opt/edgetb/venv holding tcconfig and
  cassandra-driver (wheels downloaded from PyPI on the host, installed offline), and the
  testbed's Cassandra distribution at the same absolute path as on the host, so a node's
  rendered settings and JVM command line are the same as under netns;
- ``vmlinuz`` and ``initrd.img``: the image's own kernel, booted directly by libvirt with
  the per-VM settings on its command line (name, static address, the testbed's SSH key).

The build is keyed on every input (the files above, the kernel and JRE package versions,
the Python pins, the Cassandra jars): an unchanged input set reuses the cached image.
VMs never write to it: each gets a copy-on-write overlay.

debootstrap and every chroot step run in a mount and PID namespace of their own
(``isolated``): the /proc, /sys and /dev they mount inside the build root are never
visible on the host and vanish with the namespace, and a build killed even by kill -9
takes every process of its step with it. So a killed build never leaves a mount under
the cache, and the host-visible tree can be deleted safely.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.errors import CommandError, ConfigError, StateError
from common.keyed_cache import input_key, publish
from common.paths import cache_root
from common.runner import run

from .cassandra import dist as dist_mod
from .cassandra import quiet

IMAGE_FORMAT = 1
SUITE = "bookworm"
DEFINITION = Path(__file__).resolve().parent.parent / "vm-images" / "node"
GUEST_VENV = "/opt/edgetb/venv"
GUEST_PYTHON = f"{GUEST_VENV}/bin/python"
# systemd units masked in the image (see _configure)
MASKED_UNITS = (
    "e2scrub_reap.service",
    "e2scrub_all.timer",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "man-db.timer",
    "fstrim.timer",
    "dpkg-db-backup.timer",
    "logrotate.timer",
)
GUEST_SRC = "/opt/edgetb/src"
GUEST_JAVA = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
# The guests run the endpoint workload (cassandra-driver) and tcconfig: the host's pins.
GUEST_WHEELS = ("cassandra-driver==3.30.1", "tcconfig==0.30.1", "PyYAML==6.0.3")
IMAGE_SIZE = "6G"  # sparse; the root file system grows into it inside each overlay


@dataclass(frozen=True)
class NodeImage:
    root: Path

    @property
    def disk(self) -> Path:
        return self.root / "base.qcow2"

    @property
    def kernel(self) -> Path:
        return self.root / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.root / "initrd.img"

    @property
    def manifest(self) -> dict:
        return json.loads((self.root / "manifest.json").read_text())


def image_root() -> Path:
    return cache_root() / "images"


def load() -> NodeImage:
    """The current image; StateError saying how to build it when there is none."""
    image = NodeImage((image_root() / "current").resolve())
    for path in (image.disk, image.kernel, image.initrd, image.root / "manifest.json"):
        if not path.is_file():
            raise StateError(
                "no VM image built yet: `make vms` installs QEMU and libvirt and builds it"
            )
    return image


def read_packages(definition: Path = DEFINITION) -> dict[str, list[str]]:
    """packages.txt as {"debootstrap": [...], "apt": [...]} (pure; unit-tested)."""
    groups: dict[str, list[str]] = {}
    current = None
    for raw in (definition / "packages.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = groups.setdefault(line[1:-1], [])
        elif current is None:
            raise ConfigError(f"{definition / 'packages.txt'}: package {line!r} before a [section]")
        else:
            current.append(line)
    if set(groups) != {"debootstrap", "apt"}:
        raise ConfigError(f"{definition / 'packages.txt'} needs [debootstrap] and [apt]")
    return groups


def _candidate(package: str) -> str:
    out = run(["apt-cache", "policy", package]).stdout
    for line in out.splitlines():
        if line.strip().startswith("Candidate:"):
            return line.split(":", 1)[1].strip()
    raise ConfigError(f"apt knows no package {package} (run apt-get update first)")


def inputs(dist: dist_mod.CassandraDist, definition: Path = DEFINITION) -> dict:
    """Everything the image is made of; its hash names the cached image."""
    files = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(definition.iterdir())
        if p.is_file()
    }
    return {
        "format": IMAGE_FORMAT,
        "builder": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "suite": SUITE,
        "definition": files,
        "kernel": _candidate("linux-image-amd64"),
        "jre": _candidate("openjdk-17-jre-headless"),
        "wheels": list(GUEST_WHEELS),
        "guest_python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "cassandra": dist.version,
        "cassandra_root": str(dist.root),
        "cassandra_jars": hashlib.sha256(
            json.dumps(dist.jars, sort_keys=True).encode()
        ).hexdigest(),
        # quiet nodes' class, copied with the distribution (testbed.cassandra.quiet)
        "cassandra_quiet": quiet.describe(dist)["jar_sha256"],
    }


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
        _chroot(
            rootfs, ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages["apt"]]
        )
        _chroot(rootfs, ["apt-get", "clean"])
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
        # What the libvirt backend's provisioning no longer checks in each TCG guest
        # (seconds of emulated Python each): tcconfig answers and the driver imports.
        _chroot(rootfs, [f"{GUEST_VENV}/bin/tcset", "--version"])
        _chroot(rootfs, [GUEST_PYTHON, "-c", "import cassandra, yaml"])
        (rootfs / "etc/resolv.conf").write_text("")
        progress(f"  Cassandra {dist.version} at {dist.root}")
        shutil.copytree(
            dist.root,
            rootfs / str(dist.root).lstrip("/"),
            symlinks=True,
            ignore=shutil.ignore_patterns("cds"),
        )
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


def ssh_key_argument(public_key: str) -> str:
    """The kernel command line form of an OpenSSH public key (base64: no spaces)."""
    return base64.b64encode(public_key.strip().encode()).decode()
