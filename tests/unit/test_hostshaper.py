"""The host shaper's pure parts: queue rules, control lines, offloads, its command line."""

from pathlib import Path

import pytest

from common.tags import tag_of
from emulation import hostshaper as hs
from emulation import links, shapers
from testbed import ConfigError, Topology


def test_chain_rules_queue_exactly_the_shaped_links_to_their_destinations_queue():
    text = hs.chain_rules_text([("10.0.0.12", "10.0.0.10", 0), ("10.0.0.10", "10.0.0.12", 2)])
    assert text.splitlines() == [
        "*raw",
        ":EDGETB - [0:0]",  # a declared chain is flushed by iptables-restore --noflush
        "-A EDGETB -s 10.0.0.10/32 -d 10.0.0.12/32 -j NFQUEUE --queue-num 2",
        "-A EDGETB -s 10.0.0.12/32 -d 10.0.0.10/32 -j NFQUEUE --queue-num 0",
        "COMMIT",
    ]
    assert hs.chain_rules_text([]).splitlines() == ["*raw", ":EDGETB - [0:0]", "COMMIT"]
    # every bridged IPv4 packet of the switch namespace (there is no other IPv4 there)
    assert "-A PREROUTING -j EDGETB" in hs.chain_setup_text()
    for variant, binary in (("nft", "iptables"), ("legacy", "iptables-legacy")):
        removal = hs.chain_remove_argvs(variant)
        assert [a[4] for a in removal] == ["-D", "-F", "-X"]
        assert all(a[:4] == [binary, "-w", "-t", "raw"] for a in removal)
        assert hs.list_argv(variant)[0] == binary
        assert hs.restore_argv(variant) == [f"{binary}-restore", "-w", "--noflush"]
    # bridged IPv4 through iptables, set in the switch namespace (the sysctls are per
    # namespace), IPv6 and ARP not
    assert hs.sysctl_argv() == [
        "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1",
        "net.bridge.bridge-nf-call-ip6tables=0", "net.bridge.bridge-nf-call-arptables=0",
    ]  # fmt: skip


def test_queued_links_read_back_from_iptables_listing():
    listing = (
        "-N EDGETB\n"
        "-A EDGETB -s 10.0.0.10/32 -d 10.0.0.11/32 -j NFQUEUE --queue-num 1\n"
        "-A EDGETB -s 10.0.0.11/32 -d 10.0.0.10/32 -j NFQUEUE --queue-num 0\n"
    )
    assert hs.queued_links(listing) == {
        ("10.0.0.10", "10.0.0.11", 1),
        ("10.0.0.11", "10.0.0.10", 0),
    }
    assert hs.queued_links("-N EDGETB\n") == set()
    assert hs.queued_links("") is None  # the chain is gone


def test_only_shaped_links_are_queued_to_their_destinations_queue():
    topo = Topology(edge_nodes=2, subnet="10.9.0.0/24")
    addresses = {h.name: h.address for h in topo.hosts}
    queue = {h.name: i for i, h in enumerate(topo.hosts)}  # the order the delayer binds
    matrix = links.paper(topo, 20, 1)
    queued = hs.shaped_links(matrix.links, addresses)
    a = addresses
    # the paper profile leaves the endpoint's egress unshaped: ep's packets pass untouched
    assert queued == sorted([
        (a["e0"], a["e1"], queue["e1"]), (a["e1"], a["e0"], queue["e0"]),
        (a["e0"], a["ep"], queue["ep"]), (a["e1"], a["ep"], queue["ep"]),
    ])  # fmt: skip
    assert hs.shaped_links(links.uniform(topo, 0, 0).links, addresses) == []


def test_link_lines_carry_netems_parameters_in_integers():
    line = hs.link_line("e0", "e1", links.Link(20, 2.5, 2.5, 10))
    assert line == "link e0 e1 20000000 2500000 normal 107374182 10000000"
    assert hs.link_line("a", "b", links.Link(0.1, 0, 100)).split()[3:] == [
        "100000",
        "0",
        "uniform",
        str(1 << 32),  # 100 %: every 32-bit draw is below it
        "0",
    ]
    # 7.5 % of 2^32, exactly as the delayer compares it
    assert int(hs.link_line("a", "b", links.Link(0, 0, 7.5)).split()[6]) == round(0.075 * 2**32)


def test_matrix_lines_replace_every_link_and_skip_unshaped_ones():
    topo = Topology(edge_nodes=2)
    lines = hs.matrix_lines(links.paper(topo, 5, 0).links)
    assert lines[0] == "begin" and lines[-1] == "commit"
    body = lines[1:-1]
    assert {tuple(l.split()[1:3]) for l in body} == {
        ("e0", "e1"),
        ("e1", "e0"),
        ("e0", "ep"),
        ("e1", "ep"),
    }
    assert hs.matrix_lines({}) == ["begin", "commit"]


def test_offloads_parsed_without_the_fixed_ones_and_set_back():
    shown = (
        "Features for eth0:\n"
        "tcp-segmentation-offload: on\n"
        "generic-segmentation-offload: on\n"
        "generic-receive-offload: off\n"
        "large-receive-offload: off [fixed]\n"
    )
    assert hs.parse_offloads(shown) == {"tso": "on", "gso": "on", "gro": "off"}
    assert hs.parse_offloads("generic-receive-offload: on [fixed]\n") == {}
    assert hs.offload_argv({"tso": "off", "gro": "on"}) == [
        "ethtool", "-K", "eth0", "tso", "off", "gro", "on",
    ]  # fmt: skip


def test_delayer_argv_is_tagged_for_clean_and_names_every_member():
    members = [hs.Member("e0", "10.0.0.11", "/run/netns/tb-abc123-sw", 3)]
    argv = hs.delayer_argv("/b/edgetb-shaper", "/r/s.sock", "edgetb.run=abc123:shaper",
                           members, dists="/usr/lib/tc", seed=7)  # fmt: skip
    assert argv[:3] == ["/b/edgetb-shaper", "--control", "/r/s.sock"]
    assert "--tag=edgetb.run=abc123:shaper" in argv
    assert argv[argv.index("--seed") + 1] == "7"
    assert argv[-1] == "e0=10.0.0.11=/run/netns/tb-abc123-sw=3"  # its queue there
    assert tag_of("\0".join(argv).encode()) == "abc123"


def test_control_socket_falls_back_to_run_edgetb_when_the_path_is_too_long():
    assert hs.socket_path(Path("/r/abc123"), "abc123") == Path("/r/abc123/shaper.sock")
    long_dir = Path("/" + "x" * 120)
    assert hs.socket_path(long_dir, "abc123") == Path("/run/edgetb/shaper-abc123.sock")


def test_control_errors_name_the_socket(tmp_path):
    with pytest.raises(hs.ShaperError, match="does not answer on .*nothing.sock"):
        hs.Control(tmp_path / "nothing.sock").send(["ping"])


def test_host_and_gateway_are_refused_on_backends_that_shape_inside_their_hosts():
    for name in ("host", "gateway"):
        with pytest.raises(ConfigError, match="shapes inside its hosts"):
            shapers.resolve(name, "libvirt")
    assert "host" in shapers.SHAPERS and "host" in shapers.REGISTRY


def test_build_refuses_with_the_packages_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGETB_CACHE", str(tmp_path))
    monkeypatch.setattr(hs, "missing_build_inputs", lambda: ["libmnl/libmnl.h"])
    with pytest.raises(hs.ShaperError, match="libmnl/libmnl.h missing .*make shaper"):
        hs.build()
    assert not list(tmp_path.rglob("edgetb-shaper"))
