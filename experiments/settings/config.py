"""The sweep's grid: a frozen, validated configuration and the cells it expands to.

A configuration comes from defaults, then a TOML file (``[sweep]`` table), then flags; each
layer overrides the one before. Everything is checked here, before any testbed starts:
bad input is a ConfigError naming the field and the allowed values.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from common.errors import ConfigError
from emulation.links import MAX_DELAY_MS, PROFILES, read_toml
from emulation.trace import load as load_trace
from testbed import resources
from testbed.backends import backend_options
from testbed.backends.libvirt_xml import MAX_MEMORY_MB, MAX_VCPUS, MIN_MEMORY_MB
from testbed.cassandra.config import HOUSEKEEPING, JVM_PROFILES, JvmProfile
from testbed.cassandra.quiet import BUILDS, CassandraBuild
from testbed.cassandra.readiness import Deadlines
from testbed.topology import MAX_EDGE_NODES
from workloads.ycsb import workload_path

from . import cells as grid
from . import checks
from .cells import WRITES
from .fields import Knob, as_tuple, grid_knob, knob, node_knob

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

POLICIES = ("round-robin", "token-aware")
SHAPERS = ("auto", "direct", "host", "gateway")
DEFAULT_LATENCIES = tuple(float(x) for x in range(0, 101, 10))
MAX_HEAP_MB = 64 * 1024


@dataclass(frozen=True)
class SweepConfig:
    """Everything that defines a sweep: each field once, with what the command line, the
    checks and the fingerprint need to know of it (``Knob``)."""

    # the grid
    nodes: tuple[int, ...] = grid_knob((3, 4, 5), "node counts", int, low=1, high=MAX_EDGE_NODES)
    rf: tuple[int | Literal["k"], ...] | None = grid_knob(
        None,
        "replication factors, k = the node count (RFs above a node count are skipped for it)",
        "rf",
        shown="1..k",
    )
    latency_ms: tuple[float, ...] = grid_knob(
        DEFAULT_LATENCIES,
        "one-way edge latencies in ms",
        float,
        flag="--latency",
        shown="0..100..10",
        low=0,
        high=MAX_DELAY_MS,
        decimals=3,
    )
    loss_pct: tuple[float, ...] = grid_knob(
        (0.5, 2.5, 7.5), "packet loss in %", float, flag="--loss", low=0, high=99.999, decimals=3
    )
    sites: str | None = knob(
        None,
        "edge sites as Cassandra datacenters: 3x3 (three sites of three nodes) or 2,3; "
        "nodes is their sum, the latency and loss are the WAN's (profile sites), rf is "
        "the replicas in each site, the endpoint is in the first site",
        str,
        metavar="SITES",
        fingerprint="unless-default",
    )
    profile: str = knob("paper", "link profile", str, choices=PROFILES)
    links_file: str | None = knob(
        None, "link matrix TOML for --profile file", str, flag="--links", metavar="FILE", path=True
    )
    cl: str = knob(
        "LOCAL_QUORUM",
        "consistency levels of the writes, e.g. LOCAL_QUORUM,EACH_QUORUM (several: a grid "
        "dimension)",
        "levels",
        upper=True,
    )
    writes: int = knob(1000, "recorded writes per cell", int, low=1)
    warmup: int = knob(50, "unrecorded writes before each cell", int, low=0)
    repetitions: int = knob(1, "repetitions of the grid", int, low=1)
    policy: str = knob("round-robin", "the driver's load balancing", str, choices=POLICIES)
    seed: int = knob(1, "seed of the write keys", int, low=0)
    # the testbeds
    backend: str = knob("netns", "testbed backend", str, group="testbed")
    shaper: str = knob(
        "auto",
        "how links are shaped; auto is direct where the kernel has netem, else host",
        str,
        choices=SHAPERS,
        group="testbed",
    )
    out: str = knob(
        "results", "results directory", str, metavar="DIR", group="run", fingerprint="never"
    )
    verify_probes: int = knob(
        200, "ICMP probes per network setting to check the shaping (0: skip)", int, low=0
    )
    heap_mb: int = knob(
        256, "Cassandra heap per node in MB", int, low=128, high=MAX_HEAP_MB, group="testbed"
    )
    jvm_profile: JvmProfile = knob(
        "fast", "the JVMs' settings", str, choices=JVM_PROFILES, group="testbed"
    )
    # absent_at: runs stored while stock was the default resume as stock
    cassandra_build: CassandraBuild = knob(
        "quiet", "quiet: idle executor threads stop spinning after 0.1 ms instead of 10 ms "
        "(one class rebuilt; measures as stock does, docs/backends.md); stock: Apache's jars",
        str, choices=BUILDS, group="testbed", fingerprint="unless-default", absent_at="stock",
    )  # fmt: skip
    housekeeping: str = knob(  # absent_at: runs stored before it existed ran standard
        "standard", "idle nodes' periodic work: writes (less idle CPU, for write cells; "
        "docs/backends.md), standard (what reads need), auto: writes unless YCSB cells read",
        str, choices=("auto", *HOUSEKEEPING), group="testbed", fingerprint="unless-default",
        absent_at="standard",
    )  # fmt: skip
    tls: str = knob(
        "auto", "client-to-node and internode TLS with the run's own certificates (auto: on "
        "for hosts, off for netns and libvirt; plain-text: off, on real hosts too)",
        str, choices=("auto", "on", "off", "plain-text"), group="testbed",
        fingerprint="unless-default",
    )  # fmt: skip
    request_timeout_s: float = knob(
        12.0, "driver request timeout in s", float, flag="--timeout", low=1, high=600
    )
    cql_timeout_s: float | None = knob(  # slow hosts: edge boards, emulated VMs
        None, "seconds a node may take to listen for CQL clients, the other stages of its "
        "start as many times theirs (VMs the sweep boots get more by their measured speed)",
        float, flag="--cql-timeout", metavar="S",
        shown=f"{Deadlines.cql_s:g}", low=10, high=7200, group="testbed", fingerprint="never",
    )  # fmt: skip
    baseline_writes: int = knob(200, "writes of the 0 ms baseline", int, flag=None, low=0)
    cluster_warmup: int = knob(500, "unrecorded writes after each bring-up", int, low=0)
    name: str = knob("custom", "the sweep's name", str, flag=None, fingerprint="never")
    vm_vcpus: int | None = knob(
        None,
        "vCPUs per edge VM (libvirt)",
        int,
        low=1,
        high=MAX_VCPUS,
        shown="2",
        group="testbed",
        fingerprint="unless-default",
    )
    vm_memory_mb: int | None = knob(
        None,
        "memory per edge VM in MB (libvirt)",
        int,
        flag="--vm-memory",
        metavar="MB",
        low=MIN_MEMORY_MB,
        high=MAX_MEMORY_MB,
        shown="2048",
        group="testbed",
        fingerprint="unless-default",
    )
    inventory: str | None = knob(
        None,
        "Ansible inventory of the machines (--backend hosts)",
        str,
        metavar="FILE",
        path=True,
        group="testbed",
        fingerprint="unless-default",
    )
    subnet_pool: str | None = knob(
        None, "where testbeds get their subnets", str, metavar="CIDR", shown="10.77.0.0/16",
        group="testbed", fingerprint="never",
    )  # fmt: skip
    # device-sized nodes (netns: cgroups): a value, or per host "e0=1,e1=0.5"
    node_profile: str | None = node_knob("profile", "a device profile (testbed.resources.PROFILES)")
    node_cpu: float | str | None = node_knob("cpu", "cores of CPU time per edge node")
    node_cpuset: str | None = node_knob("cpuset", "the machine's CPUs an edge node may run on")
    node_memory_mb: int | str | None = node_knob(
        "memory_mb", "memory per edge node (the heap must fit)"
    )
    node_read_mbps: float | str | None = node_knob("read_mbps", "disk read bandwidth per edge node")
    node_write_mbps: float | str | None = node_knob(
        "write_mbps", "disk write bandwidth per edge node"
    )
    first_pass: tuple[float, ...] | None = knob(
        None,
        "measure these latencies (every RF and loss) before the others, and write the "
        "figures once they are stored (e.g. 0,50,100; none: grid order)",
        float,
        many=True,
        metavar="LATENCIES",
        low=0,
        high=MAX_DELAY_MS,
        decimals=3,
        fingerprint="never",
    )
    # YCSB (workloads.ycsb): workloads besides the paper's writes, and for their cells
    # client threads, target rates (open loop; none: closed loop), read and write levels
    # (write none: cl; "read": the cell's read level, so ONE/ONE, QUORUM/QUORUM, ...),
    # the records each keyspace is loaded with, and the operations of a run phase
    workload: tuple[str, ...] = grid_knob(
        (WRITES,),
        "writes (the paper's), ycsb-a..ycsb-f or YCSB properties files, e.g. writes,ycsb-a",
        str,
    )
    threads: tuple[int, ...] = grid_knob(
        (1,), "YCSB client threads", int, low=1, high=1024, group="ycsb"
    )
    target: tuple[float, ...] | None = grid_knob(
        None, "YCSB target ops/s (open loop)", int, low=1, high=10**7, group="ycsb"
    )
    read_cl: tuple[str, ...] = grid_knob(
        ("ONE",), "YCSB read levels", str, upper=True, group="ycsb"
    )
    write_cl: tuple[str, ...] | None = grid_knob(
        None, "YCSB write levels", str, upper=True, shown="--cl", group="ycsb"
    )
    records: tuple[int, ...] = grid_knob(
        (1000,), "records YCSB loads per keyspace", int, low=1, high=10**9, group="ycsb"
    )
    operations: int = knob(1000, "YCSB operations per cell", int, low=1, group="ycsb")
    ycsb_raw: bool = knob(
        False,
        "also store every YCSB operation's latency (YCSB's raw measurement)",
        bool,
        group="ycsb",
    )
    # faults during a cell (experiments.settings.faults) and link traces replayed during it
    # (emulation.trace): grid dimensions
    fault: tuple[str, ...] = grid_knob(
        ("none",),
        "faults during cells: none, kill:e1@30%, pause:e1@30%-60%, restart:e1@30%, "
        "partition:e0,e1|e2@20%-60%, links:e0-e1:delay=200,loss=10@20%-60%",
        "fault",
        fingerprint="unless-default",
    )
    trace: tuple[str, ...] = grid_knob(
        ("none",),
        "link traces replayed during cells: none, a shipped sample (lte-handover, ...) or a "
        "CSV file",
        str,
        fingerprint="unless-default",
    )

    def __post_init__(self) -> None:
        checks.validate(self, KNOBS, DEFAULTS)

    @property
    def levels(self) -> tuple[str, ...]:
        """The writes' consistency levels (``cl``: one, or several as a grid dimension)."""
        return tuple(self.cl.split(","))

    def write_cls(self, read: str) -> tuple[str, ...]:
        """The write levels paired with the read level ``read``."""
        return tuple(read if w == "READ" else w for w in self.write_cl or self.levels)

    def ycsb_workloads(self) -> tuple[str, ...]:
        return tuple(w for w in self.workload if w != WRITES)

    def backend_options(self) -> dict[str, Any]:
        """The testbed's backend options, as `testbed up` would build them."""

        spec = resources.spec_from(
            {
                name.removeprefix("node_"): resources.parse_flag(
                    name.removeprefix("node_"), None if v is None else str(v)
                )
                for name in NODE_FIELDS
                if (v := getattr(self, name)) is not None
            }
        )
        return backend_options(
            self.backend,
            inventory=self.inventory,
            vm_vcpus=self.vm_vcpus,
            vm_memory_mb=self.vm_memory_mb,
            node_resources=spec or None,
        )

    # -- the grid: experiments.settings.cells ------------------------------------------------------

    rfs = grid.rfs
    node_housekeeping = grid.node_housekeeping
    skipped = grid.skipped
    level = grid.level
    topology = grid.topology
    site_sizes = grid.site_sizes
    cells = grid.cells
    preview = grid.preview
    phase = grid.phase

    def fingerprint(self) -> str:
        """Hash of everything that defines the measurements (not where they are stored):
        rerunning with the same fingerprint resumes the same run."""
        data = self.to_dict()
        for name, knob_ in KNOBS.items():
            at_default = data[name] == self.to_dict_value(name, knob_.left_out(DEFAULTS[name]))
            if knob_.fingerprint == "never" or (knob_.fingerprint != "always" and at_default):
                data.pop(name)
        if tuple(self.workload) == (WRITES,):  # runs stored before YCSB keep their print
            for name in ("workload", *YCSB_FIELDS):
                data.pop(name)
        if "trace" in data:  # what each trace says, not only its name
            data["trace"] = [t if t == "none" else load_trace(t).label for t in self.trace]
        if self.links_file:
            data["links_file"] = hashlib.sha256(Path(self.links_file).read_bytes()).hexdigest()
        if self.ycsb_workloads():  # what each workload's properties say, not only its name
            data["workload_files"] = {
                w: hashlib.sha256(workload_path(w).read_bytes()).hexdigest()
                for w in self.ycsb_workloads()
            }
        text = json.dumps(data, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: self.to_dict_value(k, v) for k, v in data.items()}

    @staticmethod
    def to_dict_value(name: str, value: Any) -> Any:
        """A setting's value as to_dict (and the stored configuration) holds it."""
        return list(value) if KNOBS[name].many and value is not None else value

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(
                f"unknown sweep settings {sorted(unknown)} (known: {', '.join(sorted(known))})"
            )
        values = dict(data)
        for key in LIST_FIELDS:
            if key in values and values[key] is not None:
                values[key] = as_tuple(key, values[key])
        return cls(**values)


KNOBS: dict[str, Knob] = {f.name: f.metadata["knob"] for f in fields(SweepConfig)}
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(SweepConfig)}
LIST_FIELDS = tuple(n for n, k in KNOBS.items() if k.many)
YCSB_FIELDS = tuple(n for n, k in KNOBS.items() if k.group == "ycsb")
NODE_FIELDS = tuple(n for n in KNOBS if n.startswith("node_"))


def flag_of(name: str) -> str | None:
    """The command-line flag of a setting (None: it has none of the sweep's own)."""
    flag = KNOBS[name].flag
    return "--" + name.replace("_", "-") if flag == "" else flag


def shown_default(name: str) -> str:
    """A setting's default as --help and the docs show it."""
    knob, value = KNOBS[name], DEFAULTS[name]
    if knob.shown is not None:
        return knob.shown
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


GROUP_TITLES = {
    "sweep": "What is measured",
    "ycsb": "YCSB cells (`workload` ycsb-*)",
    "testbed": "The testbeds",
    "run": "Where",
}


def load_toml(path: str | Path, *, quick: bool = False) -> dict[str, Any]:
    """The ``[sweep]`` table of a TOML file (ConfigError for anything else in it); with
    ``quick``, updated by the file's ``[quick]`` table (what --quick changes in it)."""
    path = Path(path)
    data = read_toml(path, "config file")
    if set(data) - {"sweep", "quick"}:
        raise ConfigError(
            f"{path}: unknown tables {sorted(set(data) - {'sweep', 'quick'})} (settings go "
            f"in [sweep]; [quick]: what --quick changes in this configuration)"
        )
    table = _table(path, data, "sweep")
    if quick:
        if "quick" not in data:
            raise ConfigError(
                f"{path} has no [quick] table: --quick with --config applies the file's own "
                f"quick version (drop --quick, or add [quick] with what it changes)"
            )
        table.update(_table(path, data, "quick"))
    return table


def _table(path: Path, data: dict[str, Any], name: str) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {name} must be a table ([{name}] with settings), got {table!r}")
    table = dict(table)
    for key in (k for k, knob_ in KNOBS.items() if knob_.path and k in table):
        value = table[key]
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{path}: {key} must be a string (a path), got {value!r}")
        if value:  # relative to the config file, like an include
            table[key] = str((path.parent / value).resolve())
    workloads = table.get("workload")
    if isinstance(workloads, list):  # YCSB properties files, relative to the config file
        table["workload"] = [
            str((path.parent / w).resolve())
            if isinstance(w, str) and w != WRITES and not w.startswith("ycsb-")
            else w
            for w in workloads
        ]
    return table


def preset(name: str) -> dict[str, Any]:
    """A shipped configuration (experiments/configs/NAME.toml) as a settings table."""
    path = CONFIG_DIR / f"{name}.toml"
    if not path.is_file():
        shipped = sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))
        raise ConfigError(f"no preset {name!r} (shipped: {', '.join(shipped)})")
    return load_toml(path)
