"""The checks of a sweep's settings, run when a ``SweepConfig`` is made, before anything
starts: each setting's own (its Knob: type, range, choices), then those between settings
(a grid that fits its node counts, a links file for profile file, the backend's options,
faults and traces against every node count's hosts, YCSB workloads against their levels,
a grid of a sane size). Bad input is a ConfigError naming the setting."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from emulation import links, shapers
from emulation.trace import load as load_trace
from model.consistency import check_level, required_acks, site_acks
from testbed import resources
from testbed.backends import capabilities, require_extra
from testbed.subnets import pool_from
from testbed.topology import format_sites, parse_sites
from workloads.ycsb import Spec

from .cells import WRITES, fault_label, id_number, workload_label
from .faults import parse as parse_fault
from .fields import check_knob, rf_values, strings

MAX_CELLS = 100_000


def validate(config: Any, knobs: dict, defaults: dict) -> None:
    """Every setting's own checks (its Knob), then the checks between settings;
    ConfigError naming the setting and what it allows."""
    set_ = object.__setattr__
    for name, knob_ in knobs.items():
        set_(config, name, check_knob(name, knob_, getattr(config, name), defaults[name]))
    _sites(config, defaults["nodes"])
    _grid(config)
    _testbeds(config)
    pairs = [(n, r) for n in config.nodes for r in config.rfs(n)]
    ycsb(config, pairs)
    faults(config)
    traces(config)
    _size(config, pairs)


def _grid(config: Any) -> None:
    """The grid's dimensions: RFs that fit, the first pass inside the latencies, a links
    file for profile file (alone), a level, one cell id per value."""
    set_ = object.__setattr__
    if config.rf is not None:
        set_(config, "rf", rf_values(config.rf))
        if not any(config.rfs(n) for n in config.nodes):
            raise ConfigError(
                f"the grid is empty: no replication factor of "
                f"{', '.join(map(str, config.rf))} fits any node count "
                f"({', '.join(map(str, config.nodes))})"
            )
        too_big = [r for r in config.rf if r != "k" and r > max(config.nodes)]
        if too_big:
            raise ConfigError(
                f"rf {', '.join(map(str, too_big))} exceeds every node count "
                f"({', '.join(map(str, config.nodes))}): a keyspace cannot have more "
                f"replicas than nodes"
            )
    if config.first_pass is not None:
        extra = [x for x in config.first_pass if x not in config.latency_ms]
        if extra:
            raise ConfigError(
                f"first_pass latency {extra[0]:g} ms is not in the grid's latencies "
                f"({', '.join(f'{x:g}' for x in config.latency_ms)})"
            )
    if config.profile == "file":
        if not config.links_file:
            raise ConfigError("profile 'file' needs links_file (--links FILE)")
        for n in config.nodes:  # the whole file, for every topology, before anything starts
            links.from_toml(config.topology(n), config.links_file)
        if len(config.latency_ms) != 1 or len(config.loss_pct) != 1:
            raise ConfigError(
                "profile 'file' takes its delays and losses from the links "
                "file: give a single --latency and --loss (labels only)"
            )
    elif config.links_file:
        raise ConfigError(f"links_file is only used with profile 'file', not {config.profile!r}")
    set_(config, "cl", ",".join(levels(config.cl)))
    for name in ("latency_ms", "loss_pct", "target"):  # %g in cell ids: one id each
        _one_id_each(name, getattr(config, name) or (), id_number)


def levels(value: Any) -> tuple[str, ...]:
    """The writes' levels: a name, a comma-separated list or a list of names, each a
    level a plain write takes, each once."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    names = strings("cl", value, upper=True)
    return tuple(check_level(v) for v in names)


def _sites(config: Any, default_nodes: tuple[int, ...]) -> None:
    """A sweep of sites: its layout, the node count it makes, the sites profile, RFs
    that every site can hold, levels that every keyspace can serve."""
    set_ = object.__setattr__
    if config.sites is None:
        if config.profile == "sites":
            raise ConfigError("profile 'sites' needs sites (e.g. --sites 3x3)")
        return
    sizes = parse_sites(config.sites)
    set_(config, "sites", format_sites(sizes))
    if len(sizes) < 2:
        raise ConfigError(
            f"sites {config.sites} is one site: a sweep of sites needs two or more (e.g. "
            f"2x2), or sweep --nodes {sum(sizes)}"
        )
    total = sum(sizes)
    if tuple(config.nodes) not in ((total,), default_nodes):
        raise ConfigError(
            f"sites {config.sites} hold {total} nodes: drop nodes "
            f"({', '.join(map(str, config.nodes))}), or give nodes = {total}"
        )
    set_(config, "nodes", (total,))
    if config.profile == "paper":  # the default: a sweep of sites shapes its WAN
        set_(config, "profile", "sites")
    if config.profile not in ("sites", "file"):
        raise ConfigError(
            f"a sweep of sites shapes with profile 'sites' (a LAN in each site, the "
            f"latency and loss between sites) or 'file' ([lan], [wan], [[link]] by site), "
            f"not {config.profile!r}"
        )
    if config.rf is not None:
        set_(config, "rf", rf_values(config.rf))
        big = [r for r in config.rf if r != "k" and r > min(sizes)]
        if big:
            raise ConfigError(
                f"rf {big[0]} is above the size of site "
                f"{sizes.index(min(sizes)) + 1} ({min(sizes)} nodes): with sites, rf is "
                f"the replicas in each site (k: the smallest site's size)"
            )
    topo = config.topology(total)
    for level in levels(config.cl):
        for r in config.rfs(total):
            site_acks(level, topo.per_site(r), str(topo.endpoint_site))


def _testbeds(config: Any) -> None:
    """How testbeds are built: a backend with its options, the heap within each node's
    memory, a pool, a shaper the backend can use, probes, a results directory."""
    require_extra(config.backend)  # ConfigError naming the backends, or a missing extra
    options = config.backend_options()
    if options.get("resources"):  # every node count's nodes, with the sweep's heap
        for n in config.nodes:
            for host, res in resources.resolve_spec(
                options["resources"], config.topology(n)
            ).items():
                if host != "ep":
                    res.check_heap(config.heap_mb, host)
    caps = capabilities(config.backend)
    if "inventory" in caps.required and not config.inventory:
        raise ConfigError(f"the {config.backend} backend needs inventory (--inventory FILE)")
    if not caps.owns_hosts and config.tls == "off":
        raise ConfigError(
            "--tls off on the hosts backend: the run's login and every write would cross "
            "their network in plain text; --tls plain-text if that is meant"
        )
    if config.subnet_pool is not None:
        pool_from(config.subnet_pool)
    if capabilities(config.backend).remote:  # nothing probed: the kernel is the hosts'
        shapers.resolve(config.shaper, config.backend, probe=False)
    if 0 < config.verify_probes < 20:
        raise ConfigError(
            f"verify_probes must be 0 (no check) or at least 20, got {config.verify_probes}"
        )
    if not str(config.out).strip():
        raise ConfigError("out must name a results directory")


def _size(config: Any, pairs: list[tuple[int, int]]) -> None:
    """A grid of a sane size, every write of which can succeed at the level."""
    ycsb_cells = math.prod(
        len(v or (None,))
        for v in (config.records, config.threads, config.target, config.read_cl, config.write_cl)
    )
    per_point = (WRITES in config.workload) * len(config.levels) + len(
        config.ycsb_workloads()
    ) * ycsb_cells
    count = (
        len(pairs) * config.repetitions * len(config.latency_ms) * len(config.loss_pct) * per_point
    )
    if count > MAX_CELLS:
        raise ConfigError(
            f"the grid has {count} cells, more than {MAX_CELLS} (at 1000 writes of ~10 ms, "
            f"{MAX_CELLS} cells take about 12 days); check --repetitions and the lists"
        )
    if config.sites:  # every level against every site's keyspace: _sites
        return
    for level in config.levels:
        short = sorted({r for _, r in pairs if required_acks(level, r) > r})
        if short:
            raise ConfigError(
                f"consistency level {level} needs {required_acks(level, short[0])} "
                f"replica acks but rf {', '.join(map(str, short))} has fewer replicas: "
                f"every write would fail; drop those RFs or choose another level"
            )


def faults(config: Any) -> None:
    """Every fault read and checked against every node count's hosts, before
    anything starts; faults need the netns backend (nodes killed and started by the
    sweep) and act on the paper's writes."""

    object.__setattr__(config, "fault", strings("fault", config.fault, none=True))
    parsed = [parse_fault(f) for f in config.fault]
    if not any(parsed):
        return
    _one_id_each("fault", config.fault, lambda f: f if f == "none" else fault_label(f))
    _one_id_each("fault", config.fault, _fault_meaning)
    if not capabilities(config.backend).namespaces:
        raise ConfigError("faults (--fault) run on network namespaces (the netns backend) so far")
    if config.ycsb_workloads():
        raise ConfigError("faults act on the paper's writes so far: not with YCSB workloads")
    for f in parsed:
        if f is None:
            continue
        for n in config.nodes:
            f.check(config.topology(n))
        if f.kind in ("partition", "links") and config.profile == "file":
            raise ConfigError(f"fault {f.text!r}: not with profile 'file' (its matrix is fixed)")


def traces(config: Any) -> None:
    """Every trace read and checked against every node count's hosts; traces act on
    the paper's writes, over a profile's matrix (not a fixed links file)."""

    object.__setattr__(config, "trace", strings("trace", config.trace, none=True))
    named = [t for t in config.trace if t != "none"]
    if not named:
        return
    _one_id_each("trace", config.trace, lambda t: t if t == "none" else load_trace(t).label)

    changing = [
        f for f in config.fault if (p := parse_fault(f)) and p.kind in ("partition", "links")
    ]
    if changing:  # both would drive the shaper at once, each undoing the other's
        raise ConfigError(
            f"fault {changing[0]!r} changes links, and so does a trace: not in one grid "
            f"(run them as two sweeps)"
        )
    if config.ycsb_workloads():
        raise ConfigError("link traces act on the paper's writes so far: not with YCSB")
    for t in named:
        trace = load_trace(t)
        for n in config.nodes:
            trace.check(config.topology(n))


def ycsb(config: Any, pairs: list[tuple[int, int]]) -> None:
    """The YCSB dimensions: names, ranges, and every workload x level x records
    combination checked by workloads.ycsb before anything starts."""

    object.__setattr__(
        config, "workload", strings("workload", tuple(map(canonical_workload, config.workload)))
    )
    for w in config.workload:
        if w != WRITES and not w.startswith("ycsb-") and not Path(w).is_file():
            raise ConfigError(
                f"unknown workload {w!r}: writes (the paper's), ycsb-a..ycsb-f, or a "
                f"YCSB properties file"
            )
    _one_id_each("workload", config.ycsb_workloads(), workload_label)
    sites = len(config.site_sizes() or (1,))  # sites: rf replicas in each
    for w in config.ycsb_workloads():
        for n, r in pairs:
            for read in config.read_cl:
                for write in config.write_cls(read):
                    for k in config.records:
                        Spec(
                            w,
                            records=k,
                            operations=config.operations,
                            read_cl=read,
                            write_cl=write,
                        ).check(nodes=n, rf=r * sites, heap_mb=config.heap_mb)


def _one_id_each(name: str, values: tuple, key: Any) -> None:
    """ConfigError where two values of a grid dimension are one (the same ``key``: one
    cell id, or one meaning under two spellings, which would measure a cell twice)."""
    seen: dict[str, Any] = {}
    for v in values:
        k = key(v)
        if k in seen:
            raise ConfigError(f"{name}: {seen[k]!r} and {v!r} are the same value: list it once")
        seen[k] = v


def _fault_meaning(text: str) -> str:
    """A fault as parsed, whatever its spelling (kill:e1@30% is kill:e1@30.0%)."""
    fault = parse_fault(text)
    return "none" if fault is None else repr(replace(fault, text=""))


def canonical_workload(name: str) -> str:
    """writes in any case is the paper's; a file that exists is as given (two spellings of
    one file share its label: refused); any other name a shipped YCSB workload's, in
    lower case."""
    if name.lower() == WRITES:
        return WRITES
    if Path(name).is_file():
        return name
    return name.lower()
