"""``direct``: tcconfig's netem on each host's own eth0 (sender egress), wherever the
kernel has sch_netem (and always inside VMs and inventory hosts)."""

from __future__ import annotations

import functools
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from common.errors import CommandError
from testbed import qdisc
from testbed.testbed import Testbed

from .. import tcgen
from ..links import LinkMatrix
from ..tcgen import Rule, Structure
from .base import (
    DirectRecord,
    _drop,
    _put,
)

DIRECT_DEVICE = "eth0"


def direct_rules(topology, src) -> list[Rule]:
    """Direct: on the source host's own eth0, outgoing traffic per destination."""
    return [
        Rule(src.name, dst.name, "eth0", "outgoing", f"{dst.address}/32")
        for dst in topology.hosts
        if dst is not src
    ]


class DirectShaper:
    """netem on each host's own eth0, per destination (tcconfig's outgoing rules).

    Before the first shaping, each host's qdiscs on eth0 are recorded in the run's state
    (``qdisc_before``); ``stop`` — and the hosts backend's ``down`` if shaping is still
    on — puts exactly those back (``testbed.qdisc``). A host whose qdiscs could not be
    put back is refused before anything on any host changes.
    """

    name = "direct"
    inside_hosts = True
    # netem returns success for a random drop (net/sched/sch_netem.c): TCP is not told and
    # recovers by its timer, as it does from a drop in the gateway (model.rtt)
    loss_location = "at the sender's egress (netem reports success: TCP recovers by its timer)"

    @staticmethod
    def preflight() -> None:
        """Nothing beyond tcconfig (a dependency) and the kernel's netem (``resolve``)."""

    @staticmethod
    def prepare(*, force: bool = False) -> None:
        """Nothing to build."""

    def __init__(self, tb: Testbed):
        self.tb = tb
        assert tb.state is not None
        saved = tb.state.get(DirectRecord)
        self.structures = (
            {h: Structure.from_dict(s) for h, s in saved.structures.items()} if saved else None
        )

    def record(self) -> dict[str, dict[str, str]]:
        """Each host's qdiscs on eth0 as they are now, checked to be restorable, saved."""
        assert self.tb.state is not None
        rec = self.tb.state.get(qdisc.QdiscRecord)
        if rec is not None:  # a crash after recording, before shaping ended
            return rec.before
        before = {}
        for host in self.tb.topology.hosts:
            text = self.tb.exec(host.name, qdisc.show_argv(DIRECT_DEVICE)).stdout
            qdisc.check_restorable(host.name, DIRECT_DEVICE, text)
            before[host.name] = {DIRECT_DEVICE: text}
        _put(self.tb, qdisc.QdiscRecord(before))
        return before

    def start(self) -> float:
        if self.structures is not None:
            return 0.0
        t0 = time.monotonic()
        self.record()
        structures = {}
        for host in self.tb.topology.hosts:
            structures[host.name] = tcgen.generate(
                direct_rules(self.tb.topology, host),
                tcgen.run_tcset_via(
                    functools.partial(self.tb.exec_argv, host.name, limited=False),
                    str(Path(self.tb.python).parent / "tcset"),
                ),
            )
        self.structures = structures
        _put(self.tb, DirectRecord({h: s.to_dict() for h, s in structures.items()}))
        try:
            for name, structure in structures.items():
                self._batch(name, structure.tc_lines)
        except BaseException:
            self.stop()  # no half-shaped hosts, and no record of shaping that is not there
            raise
        return time.monotonic() - t0

    def _batch(self, host: str, lines: Sequence[str]) -> None:
        argv = self.tb.exec_argv(host, ["tc", "-batch", "-"], limited=False)
        proc = subprocess.run(
            argv,
            input="".join(f"{ln}\n" for ln in lines),
            capture_output=True,
            text=True,
            timeout=30,
        )
        if proc.returncode != 0:
            raise CommandError(argv, proc.returncode, proc.stdout, proc.stderr)

    def apply(self, matrix: LinkMatrix) -> float:
        self.start()
        assert self.structures is not None
        t0 = time.monotonic()
        for host, structure in self.structures.items():
            self._batch(host, tcgen.change_lines(structure, matrix.links))
        return time.monotonic() - t0

    def problems(self, *, thorough: bool = False) -> list[str]:
        """A host lost its netem qdiscs (checked only when ``thorough``: one exec per host)."""
        if self.structures is None or not thorough:
            return []
        found = []
        for host, structure in self.structures.items():
            proc = self.tb.exec(host, ["tc", "qdisc", "show", "dev", "eth0"], check=False)
            netems = proc.stdout.count("netem")
            expected = structure.netem_qdiscs
            if proc.returncode != 0 or netems < expected:
                found.append(f"{host}: {netems} of its {expected} netem qdiscs on eth0")
        return found

    def show(self) -> list[str]:
        lines = []
        for host in self.tb.topology.hosts:
            out = self.tb.exec(host.name, ["tc", "qdisc", "show", "dev", "eth0"]).stdout
            lines += [f"{host.name}: {ln}" for ln in out.splitlines()]
        return lines

    def close(self) -> None:
        """Nothing held open: each change is a tcconfig command."""

    def stop(self) -> None:
        """Every host's eth0 back to the qdiscs recorded before the first shaping.

        Every host is tried; QdiscRestoreError lists those that failed, and the record
        stays in the run state so that a second ``clear --remove`` can finish the job.
        """
        assert self.tb.state is not None
        rec = self.tb.state.get(qdisc.QdiscRecord)
        before = rec.before if rec else {}
        problems = []
        for host in self.tb.topology.hosts:
            recorded = before.get(host.name, {}).get(DIRECT_DEVICE)
            try:
                if recorded is None:  # a run shaped before qdiscs were recorded
                    self.tb.exec(
                        host.name, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False
                    )
                else:
                    qdisc.restore(
                        lambda argv, check, h=host.name: self.tb.exec(h, argv, check=check),
                        host.name,
                        DIRECT_DEVICE,
                        recorded,
                    )
            except qdisc.QdiscRestoreError as exc:
                problems.append(str(exc))
            except CommandError as exc:
                problems.append(f"{host.name}: {' '.join(str(exc).split())[:400]}")
        if problems:
            raise qdisc.QdiscRestoreError("\n".join(problems))
        self.tb.state.drop(DirectRecord)
        _drop(self.tb, qdisc.QdiscRecord)
        self.structures = None
