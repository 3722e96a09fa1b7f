"""Build the gateway's kernel and initramfs from Debian packages only, once, cached.

- kernel: the package linux-image-amd64 depends on; its XZ-compressed bzImage is unpacked
  to the ELF ``vmlinux`` (boots through PVH in ~3.5 s instead of ~7 s under TCG);
- modules: netem, htb, u32, ingress, mirred, ifb, bridge, virtio-net/pci and their
  dependencies (read from each module's own .modinfo), loaded by ``insmod`` in order;
- userland: busybox-static, plus the host's real ``ip`` and ``tc`` and their libraries
  (busybox applets shadow them: the init calls the real ones by absolute path).

    python -m emulation gateway build
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common.errors import ConfigError, StateError
from common.keyed_cache import input_key, publish
from common.paths import cache_root
from common.runner import run

MODULES = (
    "virtio_pci",
    "virtio_net",
    "bridge",
    "sch_htb",
    "sch_netem",
    "cls_u32",
    "sch_ingress",
    "act_mirred",
    "ifb",
)
REAL_IP = "/opt/gw/ip"
REAL_TC = "/opt/gw/tc"
SYNC_MARK = "@@gateway-sync"
IMAGE_FORMAT = 2  # 2: tc's delay distribution tables (jitter) are in the image

# The guest's init: modules, a bridge over every virtio port, then a persistent
# `tc -batch` reading the command channel (ttyS1) and answering on it.
INIT_SCRIPT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /etc/modules.order); do
  args=""; [ "$m" = ifb ] && args="numifbs=0"
  insmod /lib/modules/$m.ko $args || echo "gateway: insmod $m failed"
done
IP=@REAL_IP@
TC=@REAL_TC@
# IFB devices named by the host (tcconfig's names), one per shaped port.
for arg in $(cat /proc/cmdline); do
  case "$arg" in gw.ifb=*)
    for ifb in $(echo "${arg#gw.ifb=}" | tr , ' '); do
      $IP link add name $ifb type ifb && $IP link set dev $ifb up
    done;;
  esac
done
# A qdisc nothing else has: its `qdisc show` line marks the end of a batch's output.
$TC qdisc add dev lo root handle 7777: pfifo limit 4242
$IP link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0
$IP link set br0 up
ports=0
for dev in /sys/class/net/eth*; do
  dev=${dev##*/}
  $IP link set $dev master br0
  $IP link set $dev up
  ports=$((ports+1))
done
stty -F /dev/ttyS1 raw -echo 2>/dev/null
echo "gateway: ready with $ports ports"
# Persistent tc: one process, fed line by line (a change takes milliseconds, not a fork
# per command). -force keeps it going after an error, which is reported on the channel.
while true; do
  $TC -force -batch - < /dev/ttyS1 > /dev/ttyS1 2>&1
done
"""


@dataclass(frozen=True)
class GatewayImage:
    root: Path

    @property
    def kernel(self) -> Path:
        return self.root / "vmlinux"

    @property
    def initrd(self) -> Path:
        return self.root / "initramfs.cpio.gz"

    @property
    def manifest(self) -> dict:
        return json.loads((self.root / "manifest.json").read_text())


def image_root() -> Path:
    return cache_root() / "gateway"


def load() -> GatewayImage:
    """The built image; raises StateError when it has not been built."""
    current = image_root() / "current"
    if not (current / "manifest.json").is_file():
        raise StateError(
            "the netem gateway image is not built: run "
            "`edgetb net gateway build` (`make vms` does, with QEMU)"
        )
    image = GatewayImage(current.resolve())
    for path in (image.kernel, image.initrd):
        if not path.is_file():
            raise StateError(f"gateway image incomplete, {path} missing: rebuild with --force")
    return image


def kernel_package() -> str:
    """The versioned kernel package linux-image-amd64 points at (linux-image-6.1.0-56-amd64)."""
    out = run(["apt-cache", "depends", "linux-image-amd64"]).stdout
    match = re.search(r"Depends:\s*(linux-image-\S+)", out)
    if not match:
        raise ConfigError("cannot resolve linux-image-amd64 (run apt-get update first)")
    return match.group(1)


def build(*, force: bool = False, progress=print) -> GatewayImage:
    """Build (or reuse) the gateway image; returns it. Rebuilt when an input changes."""
    ip_bin, tc_bin = shutil.which("ip"), shutil.which("tc")
    if not ip_bin or not tc_bin:
        raise ConfigError("ip and tc (iproute2) are needed on the host to build the gateway")
    kpkg = kernel_package()
    inputs = {
        "format": IMAGE_FORMAT,
        "kernel": kpkg,
        "kernel_version": _apt_version(kpkg),
        "busybox": _apt_version("busybox-static"),
        "ip": _sha256(Path(ip_bin)),
        "tc": _sha256(Path(tc_bin)),
        "tc_dist": {str(f): _sha256(f) for f in tc_distributions()},
        "init": hashlib.sha256(INIT_SCRIPT.encode()).hexdigest(),
        "modules": list(MODULES),
    }
    key = input_key(inputs)
    target = image_root() / key
    if not force and (target / "manifest.json").is_file():
        publish(image_root(), key)
        return load()
    image_root().mkdir(parents=True, exist_ok=True)
    progress(f"building the netem gateway image from {kpkg} and busybox-static")
    with tempfile.TemporaryDirectory(dir=image_root(), prefix=".build-") as tmp:
        work = Path(tmp)
        run(["apt-get", "download", kpkg, "busybox-static"], timeout=600, cwd=work)
        debs = {p.name.split("_")[0]: p for p in work.glob("*.deb")}
        for name, deb in debs.items():
            run(["dpkg-deb", "-x", str(deb), str(work / name)], timeout=300)
        kroot = work / kpkg
        vmlinuz = next((kroot / "boot").glob("vmlinuz-*"))
        staging = work / "image"
        staging.mkdir()
        (staging / "vmlinux").write_bytes(extract_vmlinux(vmlinuz.read_bytes()))
        modules_dir = next((kroot / "lib" / "modules").iterdir())
        files = _initramfs_files(
            modules_dir, work / "busybox-static" / "bin" / "busybox", Path(ip_bin), Path(tc_bin)
        )
        (staging / "initramfs.cpio.gz").write_bytes(gzip.compress(cpio_newc(files), 6))
        (staging / "manifest.json").write_text(json.dumps({**inputs, "key": key}, indent=1))
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    publish(image_root(), key)
    image = load()
    progress(
        f"gateway image: {image.root} (vmlinux {image.kernel.stat().st_size >> 20} MB, "
        f"initramfs {image.initrd.stat().st_size >> 10} KB)"
    )
    return image


def extract_vmlinux(bzimage: bytes) -> bytes:
    """The ELF kernel inside an XZ-compressed bzImage."""
    offset = bzimage.find(b"\xfd7zXZ\x00")
    if offset < 0:
        raise ConfigError("no XZ payload in the kernel image (expected CONFIG_KERNEL_XZ)")
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    elf = decompressor.decompress(bzimage[offset:])
    if not elf.startswith(b"\x7fELF"):
        raise ConfigError("the kernel payload is not an ELF image")
    return elf


def module_depends(ko: bytes) -> list[str]:
    """Names of the modules a .ko depends on (its .modinfo ``depends=`` entry)."""
    match = re.search(rb"\x00depends=([^\x00]*)\x00", ko)
    if not match or not match.group(1):
        return []
    return match.group(1).decode().split(",")


def module_order(wanted: tuple[str, ...], modules_dir: Path) -> list[tuple[str, Path]]:
    """(name, path) of every module needed for ``wanted``, dependencies first."""
    paths = {p.name[:-3].replace("-", "_"): p for p in modules_dir.rglob("*.ko")}
    builtin = set()
    builtin_file = modules_dir / "modules.builtin"
    if builtin_file.is_file():
        builtin = {
            Path(line).name[:-3].replace("-", "_") for line in builtin_file.read_text().split()
        }
    order: list[tuple[str, Path]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        if name in seen or name in builtin:
            return
        seen.add(name)
        if name not in paths:
            raise ConfigError(f"kernel module {name} not found in {modules_dir}")
        for dep in module_depends(paths[name].read_bytes()):
            visit(dep)
        order.append((name, paths[name]))

    for name in wanted:
        visit(name)
    return order


def _initramfs_files(
    modules_dir: Path, busybox: Path, ip_bin: Path, tc_bin: Path
) -> dict[str, tuple[int, bytes]]:
    """Path in the image -> (mode, content); directories have content b''."""
    files: dict[str, tuple[int, bytes]] = {}
    for d in (
        "bin",
        "dev",
        "proc",
        "sys",
        "etc",
        "lib",
        "lib/modules",
        "opt",
        "opt/gw",
        "lib64",
        "lib/x86_64-linux-gnu",
        "tmp",
    ):
        files[d] = (stat.S_IFDIR | 0o755, b"")
    files["bin/busybox"] = (stat.S_IFREG | 0o755, busybox.read_bytes())
    files["init"] = (
        stat.S_IFREG | 0o755,
        INIT_SCRIPT.replace("@REAL_IP@", REAL_IP).replace("@REAL_TC@", REAL_TC).encode(),
    )
    order = module_order(MODULES, modules_dir)
    for name, path in order:
        files[f"lib/modules/{name}.ko"] = (stat.S_IFREG | 0o644, path.read_bytes())
    files["etc/modules.order"] = (
        stat.S_IFREG | 0o644,
        "\n".join(n for n, _ in order).encode() + b"\n",
    )
    files[REAL_IP.lstrip("/")] = (stat.S_IFREG | 0o755, ip_bin.read_bytes())
    files[REAL_TC.lstrip("/")] = (stat.S_IFREG | 0o755, tc_bin.read_bytes())
    # netem's delay distributions (jitter: "distribution normal"), where tc looks for them
    for dist in tc_distributions():
        parts = dist.parent.parts[1:]
        for i in range(1, len(parts) + 1):
            files.setdefault("/".join(parts[:i]), (stat.S_IFDIR | 0o755, b""))
        files[str(dist).lstrip("/")] = (stat.S_IFREG | 0o644, dist.read_bytes())
    for lib in sorted(_shared_libraries(ip_bin) | _shared_libraries(tc_bin)):
        files[lib.lstrip("/")] = (stat.S_IFREG | 0o755, Path(lib).read_bytes())
    return files


def tc_distributions() -> list[Path]:
    """The host's tc distribution tables (normal.dist, pareto.dist, ...): iproute2 reads
    them from its library directory when netem is given jitter."""
    for d in (*sorted(Path("/usr/lib").glob("*/tc")), Path("/usr/lib/tc"), Path("/usr/lib64/tc")):
        found = sorted(d.glob("*.dist"))
        if found:
            return found
    raise ConfigError(
        "tc's distribution tables (normal.dist) are missing: apt-get install iproute2"
    )


def _shared_libraries(binary: Path) -> set[str]:
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    libs = set()
    for line in out.splitlines():  # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)"
        match = re.search(r"(/\S+)", line.split("=>")[-1])
        if match:
            libs.add(match.group(1))  # the name the loader looks for; content follows links
    return libs


def cpio_newc(files: dict[str, tuple[int, bytes]]) -> bytes:
    """A cpio archive (newc format, as the kernel's initramfs unpacker reads it)."""
    out = io.BytesIO()
    ino = 1
    for name in sorted(files):
        mode, data = files[name]
        _cpio_entry(out, name, mode, data, ino)
        ino += 1
    _cpio_entry(out, "TRAILER!!!", 0, b"", 0)
    return out.getvalue()


def _cpio_entry(out: io.BytesIO, name: str, mode: int, data: bytes, ino: int) -> None:
    encoded = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
    out.write(b"070701" + b"".join(b"%08X" % f for f in fields))
    out.write(encoded)
    out.write(b"\0" * (-(110 + len(encoded)) % 4))
    out.write(data)
    out.write(b"\0" * (-len(data) % 4))


def _apt_version(package: str) -> str:
    out = run(["apt-cache", "policy", package]).stdout
    match = re.search(r"Candidate:\s*(\S+)", out)
    if not match or match.group(1) == "(none)":
        raise ConfigError(f"package {package} not available (run apt-get update)")
    return match.group(1)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
