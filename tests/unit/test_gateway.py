import gzip
import lzma
from pathlib import Path

import pytest

from emulation.gateway import image, vm
from emulation.gateway.image import GatewayImage
from testbed import ConfigError


def test_qemu_argv_ports_offloads_channel_and_tag():
    ports = vm.ports_for(["e0", "e1", "ep"])
    assert ports[2] == vm.Port("ep", "t-ep", "eth2")
    argv = vm.qemu_argv(
        GatewayImage(Path("/img")),
        ports,
        Path("/r/console.log"),
        Path("/r/channel.sock"),
        ["ifb1", "ifb2"],
        "tcg",
        "abc123",
    )
    assert argv[:3] == ["qemu-system-x86_64", "-name", "guest=edgetb.run=abc123:gateway"]
    assert argv[argv.index("-accel") + 1] == "tcg"
    assert argv[argv.index("-append") + 1].endswith(" gw.ifb=ifb1,ifb2")
    assert "socket,id=cmd,path=/r/channel.sock,server=on,wait=off" in argv
    netdevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-netdev"]
    assert netdevs == [
        f"tap,id=n{i},ifname=t-{h},script=no,downscript=no"
        for i, h in enumerate(["e0", "e1", "ep"])
    ]
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
    assert all("csum=off" in d and "guest_tso4=off" in d and "host_ufo=off" in d for d in devices)


def test_wire_and_unwire_commands_stay_in_the_switch_namespace():
    ports = vm.ports_for(["e0", "ep"])
    wire = vm.wire_commands("tb-x-sw", ports, "br0")
    assert all(c[:3] == ["ip", "-n", "tb-x-sw"] for c in wire)
    assert ["ip", "-n", "tb-x-sw", "link", "set", "dev", "t-ep", "master", "g-ep", "up"] in wire
    unwire = vm.unwire_commands("tb-x-sw", ports, "br0")
    assert ["ip", "-n", "tb-x-sw", "link", "set", "dev", "e0", "master", "br0"] in unwire


@pytest.mark.parametrize("value", ["kvm", "tcg"])
def test_accel_override(monkeypatch, value):
    monkeypatch.setenv("EDGETB_GATEWAY_ACCEL", value)
    assert vm.known_accel() == value


def test_cpio_newc_layout():
    data = image.cpio_newc({"init": (0o100755, b"#!/bin/sh\n"), "bin": (0o40755, b"")})
    assert data.startswith(b"070701")
    assert b"init\0" in data and data.rstrip(b"\0").endswith(b"TRAILER!!!")
    assert len(data) % 4 == 0
    gzip.compress(data)  # what the build writes


def test_extract_vmlinux_from_an_xz_payload():
    elf = b"\x7fELF" + bytes(100)
    bz = b"MZ-setup-code" + lzma.compress(elf, format=lzma.FORMAT_XZ) + b"trailing"
    assert image.extract_vmlinux(bz) == elf
    with pytest.raises(ConfigError, match="no XZ payload"):
        image.extract_vmlinux(b"MZ" + bytes(64))


def test_module_order_follows_modinfo_depends(tmp_path):
    mods = tmp_path / "kernel"
    mods.mkdir()
    (mods / "sch_netem.ko").write_bytes(b"\x7fELF..\x00depends=\x00vermagic=x\x00")
    (mods / "bridge.ko").write_bytes(b"\x00depends=stp,llc\x00")
    (mods / "stp.ko").write_bytes(b"\x00depends=llc\x00")
    (mods / "llc.ko").write_bytes(b"\x00depends=\x00")
    (tmp_path / "modules.builtin").write_text("kernel/net/core/builtin_thing.ko\n")
    order = [n for n, _ in image.module_order(("bridge", "sch_netem"), tmp_path)]
    assert order == ["llc", "stp", "bridge", "sch_netem"]
    with pytest.raises(ConfigError, match="kernel module missing_mod not found"):
        image.module_order(("missing_mod",), tmp_path)
