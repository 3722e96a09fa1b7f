"""The host shaper's parts: its compiled delayer, the netfilter rules that feed it, and
its control channel. ``emulation.shapers.HostShaper`` puts them together.

Where the kernel has no sch_netem, the testbed's switch namespace queues every packet its
bridge forwards on a shaped link to the NFQUEUE of the link's destination host (a chain
of its own, ``EDGETB``, in its raw table, which bridged packets reach through
br_netfilter: nothing outside the testbed's namespaces); one ``edgetb-shaper`` process
per testbed (in that namespace, so it ends with the testbed) holds each packet for its
link's delay and drops it with the link's loss (``edgetb-shaper.c``). Held between the
hosts, a packet is stamped by the receiver's kernel when it arrives after the hold: ping
and captures see both delays of a round trip, as on a wire.

Builders here are pure (argument lists, iptables-restore text, control lines) and
unit-tested; the one-off commands run through ``common.runner``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.errors import ConfigError, TestbedError
from common.paths import cache_root

from ..links import Link

SOURCE = Path(__file__).with_name("edgetb-shaper.c")
BINARY = "edgetb-shaper"
LIBS = ("-lnetfilter_queue", "-lmnl")
HEADERS = ("libnetfilter_queue/libnetfilter_queue.h", "libmnl/libmnl.h")
PACKAGES = "libnetfilter-queue-dev libmnl-dev iptables ethtool"
CHAIN = "EDGETB"
DEVICE = "eth0"
# In the switch namespace: bridged IPv4 through iptables (br_netfilter; the kernel's
# default in a new namespace, set anyway), IPv6 and ARP not (nothing of them is shaped).
BRIDGE_SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "0",
    "net.bridge.bridge-nf-call-arptables": "0",
}
RT_PRIORITY = 10
# iproute2's netem distribution tables (Debian puts them under the multiarch lib dir)
DIST_DIRS = ("/usr/lib/x86_64-linux-gnu/tc", "/usr/lib/aarch64-linux-gnu/tc", "/usr/lib/tc",
             "/usr/lib64/tc", "/usr/share/tc")  # fmt: skip
LOSS_SCALE = 1 << 32  # a packet is dropped when a 32-bit random number is below p * this


class ShaperError(TestbedError):
    """The host shaper could not be built, started or reached; says what to do."""


def _include_dirs() -> list[Path]:
    return [Path("/usr/include"), Path("/usr/local/include")]


def missing_build_inputs() -> list[str]:
    """What building the delayer needs and this machine lacks (empty when it can build)."""
    missing = []
    if shutil.which("gcc") is None:
        missing.append("gcc")
    for header in HEADERS:
        if not any((d / header).is_file() for d in _include_dirs()):
            missing.append(header)
    return missing


def binary_path() -> Path:
    """Where the delayer built from this source lives (cached on the source's hash)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return cache_root() / "shaper" / digest / BINARY


def build(*, force: bool = False) -> Path:
    """Compile the delayer once per source version (~1 s); returns its path.

    Raises ShaperError naming the missing packages when gcc or the headers are absent."""
    path = binary_path()
    if path.is_file() and not force:
        return path
    missing = missing_build_inputs()
    if missing:
        raise ShaperError(
            f"cannot build the host shaper: {', '.join(missing)} missing "
            f"(`make shaper` installs {PACKAGES})"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{BINARY}.{os.getpid()}")
    argv = ["gcc", "-O2", "-Wall", "-Wextra", "-o", str(tmp), str(SOURCE), *LIBS]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise ShaperError(f"building the host shaper failed:\n{proc.stderr.strip()[-2000:]}")
    tmp.replace(path)
    return path


def dist_dir() -> str | None:
    """iproute2's directory of netem distribution tables, if installed."""
    for d in DIST_DIRS:
        if Path(d, "normal.dist").is_file():
            return d
    return None


def needed_tools() -> list[str]:
    """Commands the host shaper runs that this machine lacks."""
    return [t for t in ("iptables-restore", "iptables", "ethtool") if shutil.which(t) is None]


# iptables in its two back ends, the faster first: a rule change with the legacy one takes
# ~4 ms per namespace, with the nf_tables one ~16 ms (it reads the ruleset first). The
# legacy one is used where the kernel still has its tables; the choice is recorded per
# testbed, so every later command uses the same.
VARIANTS = {
    "legacy": ("iptables-legacy", "iptables-legacy-restore"),
    "nft": ("iptables", "iptables-restore"),
}


def variants() -> list[str]:
    """The iptables back ends present on this machine, in order of preference."""
    return [v for v, (_, restore) in VARIANTS.items() if shutil.which(restore) is not None]


def restore_argv(variant: str) -> list[str]:
    return [VARIANTS[variant][1], "-w", "--noflush"]


def list_argv(variant: str) -> list[str]:
    return [VARIANTS[variant][0], "-w", "-t", "raw", "-S", CHAIN]


# -- netfilter rules (inside the testbed's namespaces only) ------------------------------


# Why the host shaper cannot start without br_netfilter, and what to do instead.
NO_BRIDGE_NETFILTER = (
    "the host shaper holds packets in the testbed's bridge, which needs the kernel's "
    "bridge netfilter (br_netfilter: built in, or `modprobe br_netfilter`, which also "
    "sends the machine's other bridges through iptables), or use --shaper direct where "
    "the kernel has netem"
)


def bridge_netfilter() -> bool:
    """Whether the kernel passes bridged packets to iptables where asked (br_netfilter
    built in or loaded: its per-namespace sysctls exist). Reads only."""
    return Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists()


def sysctl_argv() -> list[str]:
    """sysctl -w of BRIDGE_SYSCTLS (run inside the switch namespace: they are per namespace)."""
    return ["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in BRIDGE_SYSCTLS.items())]


def chain_setup_text() -> str:
    """iptables-restore input that makes the chain and sends the bridge's IPv4 to it."""
    return f"*raw\n:{CHAIN} - [0:0]\n-A PREROUTING -j {CHAIN}\nCOMMIT\n"


Queued = tuple[str, str, int]  # source address, destination address, destination's queue


def chain_rules_text(queued: Iterable[Queued]) -> str:
    """iptables-restore input (for ``--noflush``) that makes the chain queue exactly the
    packets of the ``queued`` links, each to its destination's queue: the chain is
    declared, so it is flushed first."""
    lines = ["*raw", f":{CHAIN} - [0:0]"]
    lines += [
        f"-A {CHAIN} -s {src}/32 -d {dst}/32 -j NFQUEUE --queue-num {queue}"
        for src, dst, queue in sorted(queued)
    ]
    return "\n".join([*lines, "COMMIT", ""])


def chain_remove_argvs(variant: str = "nft") -> list[list[str]]:
    """The iptables commands that take the chain and its jump away again."""
    ipt = [VARIANTS[variant][0], "-w", "-t", "raw"]
    return [
        [*ipt, "-D", "PREROUTING", "-j", CHAIN],
        [*ipt, "-F", CHAIN],
        [*ipt, "-X", CHAIN],
    ]


def queued_links(listing: str) -> set[Queued] | None:
    """The links the chain queues, from ``iptables -t raw -S EDGETB``; None when the
    chain is not there."""
    if f"-N {CHAIN}" not in listing:
        return None
    found = set()
    for line in listing.splitlines():
        parts = line.split()
        if parts[:2] == ["-A", CHAIN] and "NFQUEUE" in parts and "-s" in parts and "-d" in parts:
            src = parts[parts.index("-s") + 1].removesuffix("/32")
            dst = parts[parts.index("-d") + 1].removesuffix("/32")
            found.add((src, dst, int(parts[parts.index("--queue-num") + 1])))
    return found


def shaped_links(
    matrix_links: Mapping[tuple[str, str], Link], addresses: Mapping[str, str]
) -> list[Queued]:
    """The links to queue: only the shaped ones (an unshaped link costs nothing, not a trip
    through the delayer), each to the queue of its destination (its place in
    ``addresses``, the order the delayer binds the queues in)."""
    queue = {h: i for i, h in enumerate(addresses)}
    return sorted(
        (addresses[src], addresses[dst], queue[dst])
        for (src, dst), link in matrix_links.items()
        if link.shaped
    )


def offload_argv(settings: Mapping[str, str]) -> list[str]:
    """ethtool -K for eth0 with ``settings`` (feature -> "on"/"off")."""
    argv = ["ethtool", "-K", DEVICE]
    for feature, value in settings.items():
        argv += [feature, value]
    return argv


# The offloads turned off on the hosts' eth0 while the host shaper runs: segments (not
# 64 KB aggregates) are what a wire carries, so loss and delay apply per segment.
_ETHTOOL_NAMES = {
    "tcp-segmentation-offload": "tso",
    "generic-segmentation-offload": "gso",
    "generic-receive-offload": "gro",
}


def parse_offloads(text: str) -> dict[str, str]:
    """tso/gso/gro as ``ethtool -k`` shows them ("on"/"off"), fixed ones left out."""
    found = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        short = _ETHTOOL_NAMES.get(name.strip())
        if short and "[fixed]" not in rest:
            found[short] = rest.split()[0] if rest.split() else "off"
    return found


# -- the delayer's command line and control lines ----------------------------------------


@dataclass(frozen=True)
class Member:
    """A host the delayer serves: its name, address, and where the packets to it are
    queued (the namespace file, the queue number there)."""

    name: str
    address: str
    netns_path: str
    queue: int = 0


def delayer_argv(
    binary: Path | str,
    control: Path | str,
    tag: str,
    members: Sequence[Member],
    *,
    dists: str | None,
    seed: int | None = None,
) -> list[str]:
    argv = [str(binary), "--control", str(control), f"--tag={tag}"]
    argv += ["--rt-priority", str(RT_PRIORITY)]
    if dists:
        argv += ["--dist-dir", dists]
    if seed is not None:
        argv += ["--seed", str(seed)]
    return argv + [f"{m.name}={m.address}={m.netns_path}={m.queue}" for m in members]


def link_line(src: str, dst: str, link: Link) -> str:
    """One ``link`` control line: netem's parameters in integers (ns, bit/s, a 32-bit
    loss threshold); jitter is drawn from the normal table, as the tcconfig shapers'
    ``distribution normal``."""
    delay_ns = round(link.delay_ms * 1e6)
    jitter_ns = min(round(link.jitter_ms * 1e6), delay_ns)
    dist = "normal" if jitter_ns else "uniform"
    loss = round(link.loss_pct / 100 * LOSS_SCALE)
    rate = round(link.rate_mbit * 1e6) if link.rate_mbit else 0
    return f"link {src} {dst} {delay_ns} {jitter_ns} {dist} {loss} {rate}"


def matrix_lines(matrix_links: Mapping[tuple[str, str], Link]) -> list[str]:
    """The control lines that replace every link with ``matrix_links`` (others unshaped)."""
    body = [link_line(s, d, l) for (s, d), l in sorted(matrix_links.items()) if l.shaped]
    return ["begin", *body, "commit"]


class Control:
    """The delayer's control socket: one line in, one line out."""

    def __init__(self, path: Path | str, timeout_s: float = 5.0):
        self.path = str(path)
        self.timeout_s = timeout_s

    def send(self, lines: Sequence[str]) -> list[str]:
        """Send ``lines``; returns the replies. ShaperError when it does not answer or a
        line is refused."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout_s)
                sock.connect(self.path)
                sock.sendall("".join(f"{line}\n" for line in lines).encode())
                with sock.makefile("r", encoding="utf-8") as f:
                    replies = [f.readline().rstrip("\n") for _ in lines]
        except OSError as exc:
            raise ShaperError(f"the host shaper does not answer on {self.path}: {exc}") from exc
        for line, reply in zip(lines, replies, strict=True):
            if not reply:
                raise ShaperError(f"the host shaper closed the channel at {line!r}")
            if reply.startswith("error"):
                raise ShaperError(f"the host shaper refused {line!r}: {reply[6:]}")
        return replies

    def ping(self) -> int:
        """The delayer's pid, as it answers."""
        reply = self.send(["ping"])[0]
        return int(reply.split()[1])


def socket_path(run_dir: Path, run_id: str) -> Path:
    """The control socket: in the run directory, unless that path is too long for a Unix
    socket (108 bytes), then under /run/edgetb."""
    path = run_dir / "shaper.sock"
    if len(str(path)) < 100:
        return path
    return Path("/run/edgetb") / f"shaper-{run_id}.sock"


def check_link_supported(link: Link) -> None:
    """ConfigError for a link the delayer cannot draw: jitter without iproute2's tables
    (the delayer would refuse it too, but as a failure rather than bad input)."""
    if link.jitter_ms and dist_dir() is None:
        raise ConfigError(
            "jitter needs iproute2's netem distribution tables (normal.dist), not found in "
            + ", ".join(DIST_DIRS)
        )
