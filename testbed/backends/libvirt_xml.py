"""The libvirt objects of a run as typed data, rendered to XML with ElementTree (pure):
its isolated network, the storage pool of its disks, each VM's overlay disk and domain,
and their names, which carry the run (``tb-<run>-<host>``, ``tb-<run>-net``,
``tb-<run>-disks``) so that leftovers of a killed run can be found.
"""

from __future__ import annotations

import ipaddress
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from common.errors import ConfigError

from .. import images
from ..state import PREFIX

METADATA_NS = "https://github.com/edgetb/edgetb/libvirt/1"


MAX_VCPUS = 64
MIN_MEMORY_MB = 256
MAX_MEMORY_MB = 65536


@dataclass(frozen=True)
class VMSize:
    """vCPUs and memory of one VM."""

    vcpus: int
    memory_mb: int

    def check(self, what: str) -> None:
        if not _int_in(self.vcpus, 1, MAX_VCPUS):
            raise ConfigError(
                f"{what}: vcpus must be an integer from 1 to {MAX_VCPUS}, got {self.vcpus!r}"
            )
        if not _int_in(self.memory_mb, MIN_MEMORY_MB, MAX_MEMORY_MB):
            raise ConfigError(
                f"{what}: memory must be an integer from {MIN_MEMORY_MB} to {MAX_MEMORY_MB} "
                f"MB, got {self.memory_mb!r}"
            )


def _int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


# Sized like a small edge device (a 2-core, 2 GB board); the endpoint only runs a client.
EDGE_SIZE = VMSize(vcpus=2, memory_mb=2048)
ENDPOINT_SIZE = VMSize(vcpus=1, memory_mb=1024)


@dataclass(frozen=True)
class NetworkDef:
    """An isolated libvirt network (no forwarding, no DHCP) with the host on ``address``."""

    name: str
    bridge: str
    address: str
    prefixlen: int

    def to_xml(self) -> str:
        net = ET.Element("network")
        ET.SubElement(net, "name").text = self.name
        ET.SubElement(net, "bridge", name=self.bridge, stp="off", delay="0")
        ET.SubElement(net, "dns", enable="no")  # no DNS, no DHCP: addresses are static
        ET.SubElement(
            net,
            "ip",
            address=self.address,
            netmask=str(ipaddress.IPv4Network(f"0.0.0.0/{self.prefixlen}").netmask),
        )
        return ET.tostring(net, encoding="unicode")


@dataclass(frozen=True)
class PoolDef:
    """A directory storage pool holding the run's overlay volumes."""

    name: str
    path: Path

    def to_xml(self) -> str:
        pool = ET.Element("pool", type="dir")
        ET.SubElement(pool, "name").text = self.name
        ET.SubElement(ET.SubElement(pool, "target"), "path").text = str(self.path)
        return ET.tostring(pool, encoding="unicode")


@dataclass(frozen=True)
class OverlayDef:
    """A qcow2 copy-on-write volume over the (read-only, shared) base image."""

    name: str
    capacity_bytes: int
    backing: Path

    def to_xml(self) -> str:
        vol = ET.Element("volume", type="file")
        ET.SubElement(vol, "name").text = self.name
        ET.SubElement(vol, "capacity", unit="bytes").text = str(self.capacity_bytes)
        target = ET.SubElement(vol, "target")
        ET.SubElement(target, "format", type="qcow2")
        backing = ET.SubElement(vol, "backingStore")
        ET.SubElement(backing, "path").text = str(self.backing)
        ET.SubElement(backing, "format", type="qcow2")
        return ET.tostring(vol, encoding="unicode")


@dataclass(frozen=True)
class DomainDef:
    """One VM: direct kernel boot of the image's kernel, one virtio disk and NIC."""

    name: str
    run_id: str
    host: str
    domain_type: str  # "kvm" or "qemu" (TCG)
    size: VMSize
    kernel: Path
    initrd: Path
    cmdline: str
    disk: Path
    network: str
    mac: str
    console_log: Path

    def to_xml(self) -> str:
        dom = ET.Element("domain", type=self.domain_type)
        ET.SubElement(dom, "name").text = self.name
        meta = ET.SubElement(dom, "metadata")
        ET.SubElement(meta, f"{{{METADATA_NS}}}run", host=self.host).text = self.run_id
        ET.SubElement(dom, "memory", unit="MiB").text = str(self.size.memory_mb)
        ET.SubElement(dom, "vcpu").text = str(self.size.vcpus)
        os_ = ET.SubElement(dom, "os")
        ET.SubElement(os_, "type", arch="x86_64", machine="pc").text = "hvm"
        ET.SubElement(os_, "kernel").text = str(self.kernel)
        ET.SubElement(os_, "initrd").text = str(self.initrd)
        ET.SubElement(os_, "cmdline").text = self.cmdline
        ET.SubElement(ET.SubElement(dom, "features"), "acpi")
        if self.domain_type == "kvm":
            ET.SubElement(dom, "cpu", mode="host-passthrough")
        ET.SubElement(dom, "clock", offset="utc")
        for event, action in (
            ("on_poweroff", "destroy"),
            ("on_reboot", "restart"),
            ("on_crash", "destroy"),
        ):
            ET.SubElement(dom, event).text = action
        dev = ET.SubElement(dom, "devices")
        disk = ET.SubElement(dev, "disk", type="file", device="disk")
        ET.SubElement(disk, "driver", name="qemu", type="qcow2", cache="unsafe")
        ET.SubElement(disk, "source", file=str(self.disk))
        ET.SubElement(disk, "target", dev="vda", bus="virtio")
        nic = ET.SubElement(dev, "interface", type="network")
        ET.SubElement(nic, "source", network=self.network)
        ET.SubElement(nic, "mac", address=self.mac)
        ET.SubElement(nic, "model", type="virtio")
        serial = ET.SubElement(dev, "serial", type="file")
        ET.SubElement(serial, "source", path=str(self.console_log))
        ET.SubElement(serial, "target", port="0")
        rng = ET.SubElement(dev, "rng", model="virtio")
        ET.SubElement(rng, "backend", model="random").text = "/dev/urandom"
        ET.SubElement(dev, "memballoon", model="none")
        # qemu runs as root for this domain: the image lives in root's cache, not in a
        # libvirt storage directory, and nothing is relabelled.
        label = ET.SubElement(dom, "seclabel", type="static", model="dac", relabel="no")
        ET.SubElement(label, "label").text = "+0:+0"
        ET.register_namespace("edgetb", METADATA_NS)
        return ET.tostring(dom, encoding="unicode")


def domain_name(run_id: str, host: str) -> str:
    return f"{PREFIX}-{run_id}-{host}"


def network_name(run_id: str) -> str:
    return f"{PREFIX}-{run_id}-net"


def pool_name(run_id: str) -> str:
    return f"{PREFIX}-{run_id}-disks"


def bridge_name(run_id: str) -> str:
    return f"{PREFIX}{run_id}br"  # <= 15 characters


def mac_for(address: str) -> str:
    """A stable locally administered MAC from the host's IPv4 address (QEMU's 52:54:00)."""
    b = ipaddress.IPv4Address(address).packed
    return f"52:54:00:{b[1]:02x}:{b[2]:02x}:{b[3]:02x}"


def kernel_cmdline(name: str, cidr: str, public_key: str) -> str:
    return " ".join(
        [
            "root=/dev/vda",
            "rw",
            "console=ttyS0",
            "net.ifnames=0",
            "quiet",
            "systemd.show_status=false",
            "random.trust_cpu=on",
            f"edgetb.name={name}",
            f"edgetb.addr={cidr}",
            f"edgetb.key={images.ssh_key_argument(public_key)}",
        ]
    )
