"""``gateway``: tcconfig's netem in a gateway VM routing the testbed (kept to test the
tcconfig-on-netem path on kernels without netem; ``--shaper gateway``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from importlib.metadata import version

from common.runner import run
from testbed.backends.netns import BRIDGE, switch_namespace
from testbed.state import namespace_name
from testbed.testbed import Testbed

from .. import tcgen
from ..gateway import image as gw_image
from ..gateway.vm import (
    GatewayError,
    GatewayVM,
    Port,
    ports_for,
    run_all,
    unwire_commands,
    wire_commands,
)
from ..links import LinkMatrix
from ..tcgen import Rule, Structure
from .base import (
    GatewayRecord,
    _drop,
    _put,
    _structure_cache,
)


def gateway_rules(topology, ports: Sequence[Port]) -> list[Rule]:
    """Gateway: on the guest port facing each source, incoming traffic per destination."""
    return [
        Rule(src.name, dst.name, port.guest_if, "incoming", f"{dst.address}/32")
        for src, port in zip(topology.hosts, ports, strict=True)
        for dst in topology.hosts
        if dst is not src
    ]


class GatewayShaper:
    """Links through the netem gateway VM; tcconfig rules on each port's ingress (IFB)."""

    name = "gateway"
    inside_hosts = False
    loss_location = "in the network (gateway VM), not at the sender"

    @staticmethod
    def preflight() -> None:
        """Its VM's image, built (StateError naming the command that builds it)."""
        gw_image.load()

    @staticmethod
    def prepare(*, force: bool = False) -> None:
        """The gateway VM's kernel and initramfs from Debian packages."""
        gw_image.build(force=force)

    def __init__(self, tb: Testbed):
        self.tb = tb
        self.hosts = [h.name for h in tb.topology.hosts]
        self.ports = ports_for(self.hosts)
        self.switch_ns = switch_namespace(tb.run_id)
        assert tb.state is not None
        saved = tb.state.get(GatewayRecord)
        self.vm = GatewayVM(
            tb.state.run_dir, self.switch_ns, self.ports, pid=saved.pid if saved else None
        )
        self.structure = Structure.from_dict(saved.structure) if saved else None

    def rules(self) -> list[Rule]:
        return gateway_rules(self.tb.topology, self.ports)

    def _generate(self) -> Structure:
        ns = namespace_name(self.tb.run_id, "tcgen")
        run(["ip", "netns", "add", ns])
        try:
            # Stand-ins named like the guest's ports: tcconfig checks the device exists.
            for port in self.ports:
                run(
                    [
                        "ip",
                        "-n",
                        ns,
                        "link",
                        "add",
                        "name",
                        port.guest_if,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        f"x{port.guest_if}",
                    ]
                )
            return tcgen.generate(self.rules(), tcgen.run_tcset_in(["ip", "netns", "exec", ns]))
        finally:
            run(["ip", "netns", "del", ns], check=False)

    def start(self) -> float:
        """Boot and wire the gateway (once per run); returns the seconds it took."""
        if self.structure is not None and self.vm.alive():
            return 0.0
        t0 = time.monotonic()
        image = gw_image.load()
        key = {
            "kind": "gateway",
            "rules": [r.__dict__ for r in self.rules()],
            "limit": tcgen.NETEM_LIMIT,
            "tcconfig": version("tcconfig"),
        }
        self.structure = _structure_cache(key, self._generate)
        try:
            boot_s = self.vm.start(image, self.structure.ifb_devices)
            _put(self.tb, GatewayRecord(
                self.vm.pid, boot_s, self.vm.accel, self.structure.to_dict()
            ))  # fmt: skip
            # A gateway that died leaves its per-host bridges behind: back to the shared
            # bridge first, or re-wiring fails with "RTNETLINK answers: File exists".
            run_all(unwire_commands(self.switch_ns, self.ports, BRIDGE), ignore_missing=True)
            run_all(wire_commands(self.switch_ns, self.ports, BRIDGE))
            self.vm.batch(self.structure.tc_lines)
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - t0

    def apply(self, matrix: LinkMatrix) -> float:
        self.start()
        assert self.structure is not None
        t0 = time.monotonic()
        self.vm.batch(tcgen.change_lines(self.structure, matrix.links))
        return time.monotonic() - t0

    def show(self) -> list[str]:
        """The guest's qdiscs on its ports and IFBs. Not a bare `qdisc show`: that lists
        lo's sentinel qdisc first, which ends the batch's output before anything else."""
        if not self.vm.alive():
            return []
        devices = [p.guest_if for p in self.ports]
        if self.structure is not None:
            devices += self.structure.ifb_devices
        return self.vm.batch([f"qdisc show dev {d}" for d in devices])

    def problems(self, *, thorough: bool = False) -> list[str]:
        """The gateway VM is not running (cheap), or answers without its netem qdiscs."""
        if self.structure is None:
            return []
        if not self.vm.alive():
            return [f"the gateway VM (pid {self.vm.pid}) is not running"]
        if thorough:
            try:
                shown = self.show()
            except (GatewayError, OSError) as exc:
                return [f"the gateway VM does not answer: {exc}"]
            netems = sum("netem" in line for line in shown)
            expected = self.structure.netem_qdiscs
            if netems < expected:
                return [f"the gateway has {netems} of its {expected} netem qdiscs"]
        return []

    def close(self) -> None:
        self.vm.close()

    def stop(self) -> None:
        self.vm.stop()
        run_all(unwire_commands(self.switch_ns, self.ports, BRIDGE), ignore_missing=True)
        _drop(self.tb, GatewayRecord)
        self.structure = None
