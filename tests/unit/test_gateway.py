import lzma
from pathlib import Path

import pytest

from emulation.gateway import image, vm
from emulation.gateway.image import GatewayImage
from testbed import ConfigError, accel


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
    # one NIC per port, each with every offload off (netem must see real packet sizes)
    assert [d.split(",")[1] for d in devices] == ["netdev=n0", "netdev=n1", "netdev=n2"]
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
    assert accel.known_accel() == value


def _read_newc(data: bytes) -> list[tuple[str, int, bytes]]:
    """(name, mode, content) of each entry, read as the kernel's unpacker reads newc:
    a 110-byte header of hex fields, the name padded to 4 bytes, the data padded to 4."""
    entries: list[tuple[str, int, bytes]] = []
    pos = 0
    while True:
        assert data[pos : pos + 6] == b"070701", pos
        fields = [int(data[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name_end = pos + 110 + namesize
        name = data[pos + 110 : name_end - 1].decode()
        assert data[name_end - 1] == 0
        start = name_end + (-(110 + namesize) % 4)
        content = data[start : start + size]
        pos = start + size + (-size % 4)
        if name == "TRAILER!!!":
            assert data[pos:] == b""
            return entries
        entries.append((name, mode, content))


def test_cpio_newc_layout():
    data = image.cpio_newc(
        {"init": (0o100755, b"#!/bin/sh\n"), "bin": (0o40755, b""), "a/b": (0o100644, b"12345")}
    )
    assert len(data) % 4 == 0
    assert _read_newc(data) == [
        ("a/b", 0o100644, b"12345"),
        ("bin", 0o40755, b""),
        ("init", 0o100755, b"#!/bin/sh\n"),
    ]


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
