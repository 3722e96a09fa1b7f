"""Pure parts of the libvirt and hosts backends: the typed libvirt definitions, the image
definition, SSH argument lists, inventories. No libvirt, no VM (the integration tests
boot real ones)."""

import base64
import json
import shlex
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from common.errors import ConfigError
from common.keyed_cache import input_key
from testbed import Topology, images
from testbed.backends import hosts, inventory, provision
from testbed.backends import libvirt_objects as lvo
from testbed.backends import libvirt_xml as lvx
from testbed.backends.ssh import SSH, RemoteHost
from testbed.cassandra import dist as dist_mod


def domain(**kw):
    base: dict[str, Any] = dict(
        name="tb-abc123-e0",
        run_id="abc123",
        host="e0",
        domain_type="qemu",
        size=lvx.VMSize(2, 2048),
        kernel=Path("/img/vmlinuz"),
        initrd=Path("/img/initrd.img"),
        cmdline=lvx.kernel_cmdline("e0", "10.77.0.11/24", "ssh-ed25519 AAAA k"),
        disk=Path("/run/e0.qcow2"),
        network="tb-abc123-net",
        mac="52:54:00:77:00:0b",
        console_log=Path("/run/e0.console.log"),
    )
    base.update(kw)
    return lvx.DomainDef(**base)


def el(root: ET.Element, path: str) -> ET.Element:
    """The element at ``path`` of ``root``; fails the test when there is none."""
    found = root.find(path)
    assert found is not None, f"no {path} element"
    return found


def test_domain_xml_is_what_the_data_says():
    root = ET.fromstring(domain().to_xml())
    assert root.get("type") == "qemu"
    assert root.findtext("name") == "tb-abc123-e0"
    assert el(root, "memory").get("unit") == "MiB" and root.findtext("memory") == "2048"
    assert root.findtext("vcpu") == "2"
    assert root.findtext("os/kernel") == "/img/vmlinuz"
    assert el(root, "devices/disk/source").get("file") == "/run/e0.qcow2"
    assert el(root, "devices/disk/driver").get("type") == "qcow2"
    assert el(root, "devices/interface/source").get("network") == "tb-abc123-net"
    assert el(root, "devices/interface/mac").get("address") == "52:54:00:77:00:0b"
    assert el(root, "devices/interface/model").get("type") == "virtio"
    assert root.find("cpu") is None  # TCG: QEMU's default CPU model
    meta = el(root, "metadata")[0]
    assert meta.text == "abc123" and meta.get("host") == "e0"
    kvm = ET.fromstring(domain(domain_type="kvm").to_xml())
    assert kvm.get("type") == "kvm" and el(kvm, "cpu").get("mode") == "host-passthrough"


def test_hostile_values_stay_data_not_markup():
    root = ET.fromstring(domain(cmdline="a='x' <b> & \"c\"").to_xml())
    assert root.findtext("os/cmdline") == "a='x' <b> & \"c\""


def test_kernel_cmdline_carries_name_address_and_key():
    key = "ssh-ed25519 AAAAC3Nza edgetb-abc123"
    args = dict(
        a.split("=", 1) for a in lvx.kernel_cmdline("ep", "10.77.0.10/24", key).split() if "=" in a
    )
    assert args["edgetb.name"] == "ep" and args["edgetb.addr"] == "10.77.0.10/24"
    assert base64.b64decode(args["edgetb.key"]).decode() == key
    assert args["net.ifnames"] == "0"  # the guest's NIC is eth0, as the shapers expect


def test_network_pool_and_overlay_definitions():
    net = ET.fromstring(lvx.NetworkDef("tb-abc123-net", "tbabc123br", "10.77.0.1", 24).to_xml())
    assert el(net, "ip").get("netmask") == "255.255.255.0"
    assert net.find("forward") is None  # isolated: nothing leaves the subnet
    assert el(net, "dns").get("enable") == "no" and net.find("ip/dhcp") is None
    assert len(lvx.bridge_name("abc123")) <= 15
    vol = ET.fromstring(lvx.OverlayDef("e0.qcow2", 6 << 30, Path("/img/base.qcow2")).to_xml())
    assert vol.findtext("backingStore/path") == "/img/base.qcow2"
    assert el(vol, "target/format").get("type") == "qcow2"
    assert vol.findtext("capacity") == str(6 << 30)


def test_mac_is_stable_and_distinct_per_address():
    topo = Topology(edge_nodes=5)
    macs = [lvx.mac_for(h.address) for h in topo.hosts]
    assert len(set(macs)) == len(macs) and all(m.startswith("52:54:00:") for m in macs)
    assert lvx.mac_for("10.77.0.11") == "52:54:00:4d:00:0b"


def test_vm_sizes_are_checked():
    with pytest.raises(ConfigError, match="vcpus"):
        lvx.VMSize(0, 1024).check("edge VM")
    with pytest.raises(ConfigError, match="memory"):
        lvx.VMSize(1, 64).check("edge VM")


class FakeObject:
    """A libvirt object as `clean` sees it: a name and, for domains, our metadata."""

    def __init__(self, name: str, meta_run: str | None = None):
        self._name, self._meta_run = name, meta_run

    def name(self) -> str:
        return self._name

    def metadata(self, _kind, namespace):
        import libvirt

        if self._meta_run is None or namespace != lvx.METADATA_NS:
            raise libvirt.libvirtError("no metadata")
        return f'<run xmlns="{namespace}" host="e0">{self._meta_run}</run>'


def test_names_carry_the_run_for_clean():
    ours = lvx.DomainDef(
        "tb-abc123-e0",
        "abc123",
        "e0",
        "qemu",
        lvx.VMSize(1, 512),
        Path("/k"),
        Path("/i"),
        "c",
        Path("/d"),
        "n",
        "52:54:00:00:00:0b",
        Path("/c"),
    )
    meta = el(ET.fromstring(ours.to_xml()), "metadata")[0]
    assert meta.text == "abc123"  # what _owner reads back through virDomainGetMetadata
    assert lvo._owner(FakeObject(lvx.domain_name("abc123", "e0"), "abc123"), "domains") == "abc123"
    assert lvo._owner(FakeObject(lvx.network_name("abc123")), "networks") == "abc123"
    assert lvo._owner(FakeObject(lvx.pool_name("abc123")), "pools") == "abc123"
    # someone else's objects: a name that only looks like ours, no metadata, other suffix
    assert lvo._owner(FakeObject("tb-x-y", "x"), "domains") is None
    assert lvo._owner(FakeObject(lvx.domain_name("abc123", "e0")), "domains") is None
    assert lvo._owner(FakeObject("tb-abc123-e0"), "networks") is None
    assert lvo._owner(FakeObject("default"), "networks") is None


def test_image_definition_reads_and_is_keyed_on_its_files(tmp_path, monkeypatch):
    groups = images.read_packages()
    assert "openssh-server" in groups["debootstrap"] and "python3" in groups["debootstrap"]
    assert {"openjdk-17-jre-headless", "linux-image-amd64"} <= set(groups["apt"])

    versions = {"linux-image-amd64": "6.1.1", "openjdk-17-jre-headless": "17.0.1"}
    monkeypatch.setattr(images, "_candidate", lambda package: versions[package])
    quiet_jar = {"jar_sha256": "q1"}
    monkeypatch.setattr(images.quiet, "describe", lambda dist: quiet_jar)
    definition = tmp_path / "node"
    shutil.copytree(images.DEFINITION, definition)
    cassandra = dist_mod.CassandraDist("5.0.6", tmp_path / "c", "maven", {"a.jar": "aa"})

    def key(dist=cassandra):
        return input_key(images.inputs(dist, definition))

    first = key()
    assert key() == first  # the same inputs name the same image
    seen = {first}
    for path in sorted(definition.iterdir()):  # every definition file is an input
        original = path.read_bytes()
        path.write_bytes(original + b"\n# changed\n")
        seen.add(key())
        path.write_bytes(original)
        assert key() == first
    assert len(seen) == 1 + len(list(definition.iterdir()))
    versions["openjdk-17-jre-headless"] = "17.0.2"  # a new JRE in the mirror rebuilds
    seen.add(key())
    versions["openjdk-17-jre-headless"] = "17.0.1"
    seen.add(key(dist_mod.CassandraDist("5.0.6", tmp_path / "c", "maven", {"a.jar": "bb"})))
    quiet_jar["jar_sha256"] = "q2"  # quiet nodes' class is copied into the image too
    seen.add(key())
    assert len(seen) == 4 + len(list(definition.iterdir()))


def test_guest_wheels_are_the_hosts_pins():
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    for pin in images.GUEST_WHEELS:
        if not pin.startswith("PyYAML"):
            assert f'"{pin}"' in text, pin


def test_bad_package_file_is_a_clear_error(tmp_path):
    (tmp_path / "packages.txt").write_text("openssh-server\n")
    with pytest.raises(ConfigError, match="before a"):
        images.read_packages(tmp_path)


def test_ssh_argv_quotes_the_remote_command(tmp_path):
    ssh = SSH("abc123", tmp_path)
    argv = ssh.argv(RemoteHost("e0", "10.77.0.11"), ["echo", "a b", "$HOME;x"])
    assert argv[0] == "ssh" and argv[-3:-1] == ["root@10.77.0.11", "--"]
    assert shlex.split(argv[-1]) == ["echo", "a b", "$HOME;x"]
    # every ssh process carries the run's tag (clean finds connection masters by it)
    assert any("edgetb.run=abc123:" in a for a in argv)
    opts = ssh.options()
    assert all(opts[i] == "-o" for i in range(2, len(opts), 2))


def test_inventory_groups_hosts_by_role(tmp_path):
    ssh = SSH("abc123", tmp_path)
    topo = Topology(edge_nodes=2)
    inv = provision.inventory(
        [RemoteHost(h.name, h.address) for h in topo.hosts],
        {h.name: h.role for h in topo.hosts},
        ssh,
    )
    children = inv["all"]["children"]
    assert sorted(children["edge"]["hosts"]) == ["e0", "e1"]
    assert children["endpoint"]["hosts"]["ep"]["ansible_host"] == "10.77.0.10"


def _write_inventory(tmp_path, hosts_vars):
    path = tmp_path / "inv.json"
    path.write_text(json.dumps({"all": {"hosts": hosts_vars}}))
    return path


def test_hosts_keep_their_inventory_addresses(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETB_REGISTRY", str(tmp_path / "registry"))
    topo = Topology(edge_nodes=1)
    key = tmp_path / "key"
    key.write_text("x")
    good = {
        "e0": {"ansible_host": "10.77.0.11", "ansible_ssh_private_key_file": str(key)},
        "ep": {"ansible_host": "10.77.0.10", "ansible_ssh_private_key_file": str(key)},
    }
    hosts.HostsBackend.check_options(topo, {"inventory": str(_write_inventory(tmp_path, good))})
    missing = {"e0": good["e0"]}
    with pytest.raises(ConfigError, match="no host for ep"):
        hosts.HostsBackend.check_options(
            topo, {"inventory": str(_write_inventory(tmp_path, missing))}
        )
    # a board on its own LAN keeps its address; one reached by another address is
    # numbered by edgetb_address
    lan = {**good, "e0": {**good["e0"], "ansible_host": "192.168.1.20"}}
    placed = hosts.HostsBackend.place(
        topo, {"inventory": str(_write_inventory(tmp_path, lan))}, None
    )
    assert placed.placed and placed.subnet is None
    assert {h.name: h.address for h in placed.hosts} == {"e0": "192.168.1.20", "ep": "10.77.0.10"}
    assert Topology.from_dict(placed.to_dict()) == placed
    board = {
        **good,
        "e0": {**good["e0"], "ansible_host": "192.168.1.20", "edgetb_address": "172.16.5.4"},
    }
    placed = hosts.HostsBackend.place(
        topo, {"inventory": str(_write_inventory(tmp_path, board))}, None
    )
    assert placed.host("e0").address == "172.16.5.4"
    with pytest.raises(ConfigError, match="leave --subnet out"):
        hosts.HostsBackend.check_options(
            Topology(edge_nodes=1, subnet="10.9.0.0/24"),
            {"inventory": str(_write_inventory(tmp_path, good))},
        )
    with pytest.raises(ConfigError, match="inventory not found"):
        hosts.HostsBackend.check_options(topo, {"inventory": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="needs --inventory"):
        hosts.HostsBackend.check_options(topo, {})


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"ansible_port": "abc"}, "ansible_port 'abc' is not a port"),
        ({"ansible_port": 0}, "ansible_port '0' is not a port"),
        ({"ansible_port": 70000}, "ansible_port '70000' is not a port"),
        ({"ansible_user": "-oProxyCommand=x"}, "ansible_user '-oProxyCommand=x' starts with '-'"),
        ({"ansible_user": "a b"}, "ansible_user 'a b' contains whitespace"),
        ({"ansible_host": "-oProxyCommand=x"}, "ansible_host '-oProxyCommand=x' is not an IPv4"),
        ({"ansible_host": "root@evil"}, "ansible_host 'root@evil' is not an IPv4"),
    ],
)
def test_inventory_values_ssh_would_misread_are_refused(tmp_path, extra, message):
    topo = Topology(edge_nodes=1)
    key = tmp_path / "key"
    key.write_text("x")
    inv = {
        "e0": {"ansible_host": "10.77.0.11", "ansible_ssh_private_key_file": str(key), **extra},
        "ep": {"ansible_host": "10.77.0.10", "ansible_ssh_private_key_file": str(key)},
    }
    with pytest.raises(ConfigError, match=f"inv.json: e0: {message}"):
        hosts.HostsBackend.check_options(topo, {"inventory": str(_write_inventory(tmp_path, inv))})


def test_inventory_ports_and_users_that_are_fine(tmp_path):
    inv: dict[str, dict[str, str | int]] = {
        "e0": {"ansible_host": "10.77.0.11", "ansible_port": "2222", "ansible_user": "pi"},
        "ep": {"ansible_host": "10.77.0.10", "ansible_port": 22},
    }
    found = inventory.remote_hosts(Topology(edge_nodes=1), inv)
    assert (found["e0"].port, found["e0"].user) == (2222, "pi")
    assert (found["ep"].port, found["ep"].user) == (22, "root")


def test_cli_rejects_backend_options_that_do_not_apply():
    from testbed.cli import backend_options
    from testbed.parser import build_parser

    args = build_parser().parse_args(["up", "--inventory", "x.ini"])
    with pytest.raises(ConfigError, match="--backend hosts"):
        backend_options(args)
    args = build_parser().parse_args(["up", "--backend", "libvirt", "--vm-memory", "1024"])
    assert backend_options(args) == {"edge_size": {"vcpus": 2, "memory_mb": 1024}}


def test_remote_backends_always_shape_inside_their_hosts():
    from emulation import shapers

    assert shapers.resolve("auto", "libvirt") == "direct"
    assert shapers.resolve("direct", "hosts") == "direct"
    with pytest.raises(ConfigError, match="shapes inside its hosts"):
        shapers.resolve("gateway", "libvirt")


def test_guests_slower_than_the_reference_get_proportionally_longer_deadlines():
    from testbed.backends.libvirt import REFERENCE_BOOT_S, guest_slowness
    from testbed.cassandra.readiness import Deadlines

    ref = REFERENCE_BOOT_S
    assert guest_slowness({}) == 1.0  # not booted: nothing measured, nothing scaled
    assert guest_slowness({"e0": ref / 2, "ep": ref / 3}, cores=2) == 1.0  # faster: never less
    # the last VM counts; three VMs on two cores take 1.5x as long as two
    assert guest_slowness({"e0": 2 * ref, "ep": 3 * ref}, cores=2) == pytest.approx(3.0)
    assert guest_slowness({"e0": 3 * ref, "e1": 3 * ref, "ep": 3 * ref}, cores=2) == pytest.approx(
        2.0
    )
    scaled = Deadlines().scaled(3.0)
    assert scaled.cql_s == 3 * Deadlines().cql_s and scaled.driver_s == 3 * Deadlines().driver_s


def test_a_longer_cql_timeout_gives_every_stage_as_many_times_more():
    """``--cql-timeout`` (hosts of an inventory: nothing is booted to measure them) says
    how slow the hosts are: the JVM's first log line of a TCG guest beside other work
    came after 44 s, past the 30 s default, while CQL had its 600 s."""
    from testbed.cassandra.readiness import Deadlines

    default = Deadlines()
    slow = Deadlines.for_cql(3 * default.cql_s)
    assert slow == default.scaled(3.0)
    assert Deadlines.for_cql(default.cql_s) == default
    quick = Deadlines.for_cql(60)  # less time for CQL: the other stages keep theirs
    assert quick.cql_s == 60 and quick.process_s == default.process_s
