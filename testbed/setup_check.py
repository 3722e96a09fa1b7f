"""`python -m testbed check`: a cheap smoke test of every component the set-up installed.

Run at the end of `make install` (the parts of it at the end of `make core` and `make
vms`), so a machine that is missing a piece of state (a directory a daemon needs, a
package, an image) fails there, with the component named,
and not halfway through a test run or a sweep. Each check uses the component for real
and leaves nothing behind: a transient isolated libvirt network is created and
destroyed, QEMU starts and quits, Java runs Cassandra's own version tool. (The gateway
image is checked by `python -m emulation gateway check`.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence

from common.errors import TestbedError

Check = Callable[[], str]


class SetupError(TestbedError):
    """A component the set-up installed does not work."""


def _probe_domain_xml(name: str, network: str) -> str:
    """A diskless TCG guest with one NIC on ``network``: starting it makes libvirt do what
    it does for every testbed VM (write the network's MAC table, attach a TAP)."""
    dom = ET.Element("domain", type="qemu")
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "memory", unit="MiB").text = "32"
    ET.SubElement(dom, "vcpu").text = "1"
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type", arch="x86_64", machine="pc").text = "hvm"
    devices = ET.SubElement(dom, "devices")
    nic = ET.SubElement(devices, "interface", type="network")
    ET.SubElement(nic, "source", network=network)
    ET.SubElement(nic, "model", type="virtio")
    ET.SubElement(dom, "on_crash").text = "destroy"
    return ET.tostring(dom, encoding="unicode")


def check_libvirt() -> str:
    """libvirtd can create a transient isolated network and start a guest on it, then
    destroy both (it needs its state directories for that, e.g. /var/lib/libvirt/dnsmasq,
    which systemd-tmpfiles creates only on systemd machines)."""
    import libvirt

    from .backends.libvirt_objects import connect
    from .backends.libvirt_xml import NetworkDef

    conn = connect()
    # Names outside the testbed's pattern (tb-<run>-...): `clean` never sees them.
    name = f"edgetb-check-{os.getpid()}"
    bridge = f"edgetbchk{os.getpid() % 100000}"
    xml = NetworkDef(name, bridge, "198.18.255.1", 30).to_xml()
    t0 = time.monotonic()
    net = dom = None
    try:
        try:
            net = conn.networkCreateXML(xml)
            dom = conn.createXML(_probe_domain_xml(name, name), 0)
        except libvirt.libvirtError as exc:
            raise SetupError(
                f"libvirtd cannot start a guest on an isolated network: {exc}"
            ) from exc
    finally:
        for obj in (dom, net):
            if obj is not None:
                try:
                    obj.destroy()
                except libvirt.libvirtError:
                    pass
        conn.close()
    return (
        f"transient isolated network and a guest on it started and destroyed in "
        f"{time.monotonic() - t0:.2f} s"
    )


def check_qemu() -> str:
    """QEMU starts (no machine, no accelerator needed) and quits from its monitor."""
    argv = ["qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none"]
    argv += ["-monitor", "stdio"]
    try:
        proc = subprocess.run(argv, input="quit\n", capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"QEMU does not run: {exc}") from exc
    if proc.returncode != 0:
        raise SetupError(f"QEMU exited with {proc.returncode}: {proc.stderr.strip()[-300:]}")
    version = subprocess.run(
        ["qemu-system-x86_64", "--version"], capture_output=True, text=True, timeout=30
    ).stdout.splitlines()[0]
    return f"{version}: started and quit"


def check_cassandra() -> str:
    """Java 17 runs Cassandra's jars (its GetVersion tool, what `cassandra -v` runs)."""
    from .cassandra import dist as dist_mod
    from .cassandra.java import find_java

    java = find_java(None)
    dist = dist_mod.load()
    argv = [java.path, "-cp", dist.classpath, "org.apache.cassandra.tools.GetVersion"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    printed = proc.stdout.strip().splitlines()[-1:] or [""]
    if proc.returncode != 0 or printed[0] != dist.version:
        raise SetupError(
            f"Java {java.version} cannot run Cassandra {dist.version}'s jars (exit "
            f"{proc.returncode}, printed {printed[0]!r}): {proc.stderr.strip()[-300:]}"
        )
    return f"Java {java.version} runs Cassandra {dist.version}"


def check_vm_image() -> str:
    from . import images

    img = images.load()
    return f"VM image present ({img.root})"


CHECKS: dict[str, Check] = {
    "libvirt": check_libvirt,
    "qemu": check_qemu,
    "cassandra": check_cassandra,
    "image": check_vm_image,
}


def component(name: str) -> str:
    """argparse type of a check's name."""
    if name not in CHECKS:
        raise argparse.ArgumentTypeError(f"unknown component {name!r} ({', '.join(CHECKS)})")
    return name


def run_checks(names: Sequence[str] = (), progress: Callable[[str], None] = print) -> None:
    """Run the named checks (every one when none is named); raises SetupError naming each
    component that failed."""
    failed = []
    for name in names or CHECKS:
        check = CHECKS[name]
        try:
            progress(f"  {name}: {check()}")
        except TestbedError as exc:
            failed.append(f"{name}: {exc}")
            progress(f"  {name}: FAILED: {exc}")
    if failed:
        raise SetupError("set-up check failed: " + "; ".join(failed))
