import pytest

from emulation import tcgen
from emulation.links import Link
from emulation.tcgen import Rule
from testbed import ConfigError

# Real `tcset ethN --direction incoming --dst-network D/32 --limit 10000 --add --tc-command`
# output (tcconfig 0.30.1) for two destinations on one device.
OUT_11 = """modprobe ifb
/usr/bin/ip link add ifb5873 type ifb
/usr/bin/ip link set dev ifb5873 up
/usr/sbin/tc qdisc add dev eth1 ingress
/usr/sbin/tc filter add dev eth1 parent ffff: protocol ip u32 match u32 0 0 flowid 16f1: action mirred egress redirect dev ifb5873
/usr/sbin/tc qdisc add dev ifb5873 root handle 16f1: htb default 1
/usr/sbin/tc class add dev ifb5873 parent 16f1: classid 16f1:1 htb rate 32000000.0kbit
/usr/sbin/tc class add dev ifb5873 parent 16f1: classid 16f1:72 htb rate 32000000.0Kbit ceil 32000000.0Kbit
/usr/sbin/tc qdisc add dev ifb5873 parent 16f1:72 handle 23b5: netem limit 10000.000000
/usr/sbin/tc filter add dev ifb5873 protocol ip parent 16f1: prio 5 u32 match ip dst 10.77.0.11/32 match ip src 0.0.0.0/0 flowid 16f1:72
"""
OUT_12 = OUT_11.replace("16f1:72", "16f1:54").replace("10.77.0.11/32", "10.77.0.12/32")

R11 = Rule("e1", "e0", "eth1", "incoming", "10.77.0.11/32")
R12 = Rule("e1", "e2", "eth1", "incoming", "10.77.0.12/32")


def test_merge_keeps_shared_lines_once_and_unique_netem_handles():
    s = tcgen.merge([(R11, OUT_11), (R12, OUT_12)])
    assert s.ifb_devices == ["ifb5873"]
    assert s.ip_commands == [
        ["link", "add", "ifb5873", "type", "ifb"],
        ["link", "set", "dev", "ifb5873", "up"],
    ]
    assert s.tc_lines.count("qdisc add dev eth1 ingress") == 1
    assert sum(l.startswith("qdisc add dev ifb5873 root") for l in s.tc_lines) == 1
    assert s.slot("e1", "e0") == tcgen.NetemSlot("ifb5873", "16f1:1000", "8000:")
    assert s.slot("e1", "e2") == tcgen.NetemSlot("ifb5873", "16f1:1001", "8001:")
    netems = [l for l in s.tc_lines if "netem" in l]
    assert netems == [
        "qdisc add dev ifb5873 parent 16f1:1000 handle 8000: netem limit 10000",
        "qdisc add dev ifb5873 parent 16f1:1001 handle 8001: netem limit 10000",
    ]
    # each filter sends its destination to its own class; the default class stays 16f1:1
    assert any("dst 10.77.0.11/32" in l and l.endswith("flowid 16f1:1000") for l in s.tc_lines)
    assert any("dst 10.77.0.12/32" in l and l.endswith("flowid 16f1:1001") for l in s.tc_lines)
    assert "class add dev ifb5873 parent 16f1: classid 16f1:1 htb rate 32000000.0kbit" in s.tc_lines
    assert not any(l.startswith(("/", "modprobe")) for l in s.tc_lines)
    assert tcgen.Structure.from_dict(s.to_dict()) == s


def test_merge_renumbers_the_classes_tcconfigs_hash_made_collide():
    """tcconfig's --tc-command picks a class minor from 2 hex digits of a hash: two
    destinations on one device can get the same one; each still gets a class of its own."""
    clash = OUT_12.replace("16f1:54", "16f1:72")
    s = tcgen.merge([(R11, OUT_11), (R12, clash)])
    assert s.slot("e1", "e0").parent != s.slot("e1", "e2").parent
    classes = [l for l in s.tc_lines if l.startswith("class add") and not l.endswith("kbit")]
    assert len({l.split()[7] for l in classes}) == len(classes) == 2


def test_merge_needs_a_netem_per_rule():
    with pytest.raises(ConfigError, match="no netem qdisc for e1>e0"):
        tcgen.merge([(R11, "/usr/sbin/tc qdisc add dev eth1 ingress\n")])


def test_change_lines_always_carry_the_full_parameter_set():
    s = tcgen.merge([(R11, OUT_11), (R12, OUT_12)])
    lines = tcgen.change_lines(s, {("e1", "e0"): Link(50, 2, 2.5)})
    assert lines == [
        "qdisc change dev ifb5873 parent 16f1:1000 handle 8000: netem limit 10000 "
        "delay 50ms 2ms distribution normal loss 2.5%",
        # an unlisted pair is explicitly reset, not left with old values
        "qdisc change dev ifb5873 parent 16f1:1001 handle 8001: netem limit 10000 delay 0ms loss 0%",
    ]


def test_tcset_argv():
    argv = tcgen.tcset_argv(R11)
    assert argv[0].endswith("/tcset")
    assert argv[1:] == [
        "eth1",
        "--direction",
        "incoming",
        "--dst-network",
        "10.77.0.11/32",
        "--limit",
        "10000",
        "--add",
        "--tc-command",
    ]


def test_rules_of_both_shapers_cover_every_ordered_pair():
    from emulation.gateway.vm import ports_for
    from emulation.shapers import direct_rules, gateway_rules
    from testbed import Topology

    topo = Topology(edge_nodes=2)  # e0 .11, e1 .12, ep .10
    gw = gateway_rules(topo, ports_for(["e0", "e1", "ep"]))
    assert len(gw) == 6
    assert Rule("e1", "ep", "eth1", "incoming", "10.77.0.10/32") in gw
    assert {(r.src, r.dst) for r in gw} == {
        (a, b) for a in ("e0", "e1", "ep") for b in ("e0", "e1", "ep") if a != b
    }
    direct = direct_rules(topo, topo.host("ep"))
    assert direct == [
        Rule("ep", "e0", "eth0", "outgoing", "10.77.0.11/32"),
        Rule("ep", "e1", "eth0", "outgoing", "10.77.0.12/32"),
    ]
    argv = tcgen.tcset_argv(direct[0])
    assert argv[1:6] == ["eth0", "--direction", "outgoing", "--dst-network", "10.77.0.11/32"]


def test_merge_renumbers_a_class_tcconfig_gave_the_default_minor():
    """tcconfig's minor is 1 + two hex digits of a hash: one destination in 256 gets 1,
    the default class's. Its own class, netem and filter are renamed; the default class
    line stays, once."""
    default = "class add dev ifb5873 parent 16f1: classid 16f1:1 htb rate 32000000.0kbit"
    on_one = OUT_11.replace("16f1:72", "16f1:1")
    s = tcgen.merge([(R11, on_one), (R12, OUT_12)])
    assert s.slot("e1", "e0").parent == "16f1:1000"
    assert s.slot("e1", "e2").parent == "16f1:1001"
    assert s.tc_lines.count(default) == 1
    classes = [l for l in s.tc_lines if l.startswith("class add") and "ceil" in l]
    assert [l.split()[7] for l in classes] == ["16f1:1000", "16f1:1001"]
    assert any("dst 10.77.0.11/32" in l and l.endswith("flowid 16f1:1000") for l in s.tc_lines)
    assert "htb default 1" in " ".join(s.tc_lines)
    assert not any(l.endswith("flowid 16f1:1") for l in s.tc_lines)
