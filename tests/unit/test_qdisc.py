"""Recording and restoring an interface's qdiscs (testbed.qdisc): parsing, the restore
commands, and restore() against a fake host whose kernel acts like Linux's."""

import subprocess
from typing import cast

import pytest

from common.errors import CommandError, ConfigError
from testbed import Testbed, qdisc

FQ_CODEL = (
    "qdisc fq_codel 0: root refcnt 2 limit 10240p flows 1024 quantum 1514 target 5ms "
    "interval 100ms memory_limit 32Mb ecn drop_batch 64 \n"
)
MQ = (
    "qdisc mq 0: root \n"
    "qdisc fq_codel 0: parent :2 limit 10240p flows 1024 quantum 1514 target 5ms interval "
    "100ms memory_limit 32Mb ecn drop_batch 64 \n"
    "qdisc fq_codel 0: parent :1 limit 10240p flows 1024 quantum 1514 target 5ms interval "
    "100ms memory_limit 32Mb ecn drop_batch 64 \n"
)
NOQUEUE = "qdisc noqueue 0: root refcnt 2 \n"
USER_FQ = (
    "qdisc fq 8001: root refcnt 2 limit 10000p flow_limit 100p buckets 1024 orphan_mask "
    "1023 quantum 3028b initial_quantum 15140b low_rate_threshold 550Kbit refill_delay "
    "40ms timer_slack 10us horizon 10s horizon_drop \n"
)
INGRESS = "qdisc ingress ffff: parent ffff:fff1 ---------------- \n"
# what tcconfig's outgoing rules leave (the testbed's shaping)
SHAPED = (
    "qdisc htb 1a37: root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000\n"
    "qdisc netem 2007: parent 1a37:7 limit 1000 delay 50ms\n"
)


def test_parse_and_normalize():
    qs = qdisc.parse(MQ + INGRESS)
    assert [(q.kind, q.handle, q.parent) for q in qs] == [
        ("mq", "0:", "root"),
        ("fq_codel", "0:", ":2"),
        ("fq_codel", "0:", ":1"),
        ("ingress", "ffff:", "ffff:fff1"),
    ]
    assert qs[0].is_default and qs[3].is_ingress
    user = qdisc.parse(USER_FQ)[0]
    assert user.handle == "8001:" and "refcnt" not in user.params
    assert user.params[:2] == ("limit", "10000p")
    # refcnt, spacing and trailing blanks are not state; a continuation line is joined
    assert qdisc.normalize(NOQUEUE) == "qdisc noqueue 0: root"
    assert qdisc.normalize("qdisc cake 8002: root refcnt 9 bandwidth unlimited\n rtt 100ms\n") == (
        "qdisc cake 8002: root bandwidth unlimited rtt 100ms"
    )
    assert qdisc.parse("qdisc noqueue 0: dev lo root refcnt 2")[0].parent == "root"
    with pytest.raises(ConfigError, match="not a `tc qdisc show` line"):
        qdisc.parse('Cannot find device "eth9"')


@pytest.mark.parametrize("recorded", [FQ_CODEL, MQ, NOQUEUE, FQ_CODEL + INGRESS])
def test_kernel_defaults_come_back_by_deleting_the_root(recorded):
    assert qdisc.restore_commands("eth0", recorded) == [
        ["tc", "qdisc", "del", "dev", "eth0", "root"]
    ]


def test_a_users_classless_root_qdisc_is_put_back_as_it_was():
    (cmd,) = qdisc.restore_commands("eth0", USER_FQ)
    assert cmd[:9] == ["tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "8001:", "fq"]
    assert cmd[9:11] == ["limit", "10000p"] and cmd[-1] == "horizon_drop"
    assert "refcnt" not in cmd


@pytest.mark.parametrize("recorded", [SHAPED, "qdisc prio 1: root refcnt 2 bands 3\n", ""])
def test_what_cannot_be_rebuilt_is_refused_before_shaping(recorded):
    with pytest.raises(ConfigError) as err:
        qdisc.check_restorable("e2", "eth0", recorded)
    assert str(err.value).startswith("e2: eth0")


class FakeHost:
    """tc on one interface, as the kernel answers: `del root` brings the default back."""

    def __init__(self, default: str, current: str, *, broken: bool = False):
        self.default = default
        self.current = current
        self.broken = broken  # a kernel that does not do what it is told
        self.commands: list[list[str]] = []

    def run(self, argv, check):
        argv = list(argv)
        self.commands.append(argv)
        if argv[:3] == ["tc", "qdisc", "show"]:
            return subprocess.CompletedProcess(argv, 0, self.current, "")
        if self.broken:
            return subprocess.CompletedProcess(argv, 2, "", "RTNETLINK answers: busy")
        if argv[:3] == ["tc", "qdisc", "del"]:
            if qdisc.parse(self.current)[0].is_default:
                if check:
                    raise CommandError(
                        argv, 2, "", "Error: Cannot delete qdisc with handle of zero."
                    )
                return subprocess.CompletedProcess(argv, 2, "", "handle of zero")
            self.current = self.default
        elif argv[:3] == ["tc", "qdisc", "replace"]:
            kind, handle, params = argv[8], argv[7], " ".join(argv[9:])
            self.current = f"qdisc {kind} {handle} root refcnt 2 {params} \n"
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_restore_after_shaping_gives_exactly_the_recorded_qdiscs():
    host = FakeHost(default=MQ, current=SHAPED)
    assert qdisc.restore(host.run, "e0", "eth0", MQ) is True
    assert qdisc.normalize(host.current) == qdisc.normalize(MQ)
    user = FakeHost(default=FQ_CODEL, current=SHAPED)
    assert qdisc.restore(user.run, "e1", "eth0", USER_FQ) is True
    assert qdisc.normalize(user.current) == qdisc.normalize(USER_FQ)


def test_restore_of_an_untouched_interface_changes_nothing():
    host = FakeHost(default=FQ_CODEL, current=FQ_CODEL)
    assert qdisc.restore(host.run, "e0", "eth0", FQ_CODEL) is False
    assert [c[2] for c in host.commands] == ["show"]


def test_restore_that_does_not_take_is_an_error_naming_the_host():
    host = FakeHost(default=FQ_CODEL, current=SHAPED, broken=True)
    with pytest.raises(qdisc.QdiscRestoreError) as err:
        qdisc.restore(host.run, "e3", "eth0", FQ_CODEL)
    text = str(err.value)
    assert text.startswith("e3: eth0 did not get its qdiscs back")
    assert "fq_codel 0: root" in text and "htb 1a37: root" in text


# -- the direct shaper records before shaping and restores every host ------------------------


class FakeTestbed:
    """What DirectShaper uses of a Testbed: topology, run state, exec on a host (passed as
    one with cast: it has only those parts)."""

    def __init__(self, hosts: dict[str, FakeHost]):
        from testbed import Topology
        from testbed.state import RunState

        self.topology = Topology(edge_nodes=len(hosts) - 1)
        self.hosts = hosts
        self.saved = 0
        self.state = RunState("abc123", "netns", self.topology.to_dict(), None)
        self.state.save = self._save  # type: ignore[method-assign]  # counted, not written

    def _save(self):
        self.saved += 1

    def exec(self, host, argv, check=True):
        result = self.hosts[host].run(argv, check)
        if check and result.returncode != 0:
            raise CommandError(list(argv), result.returncode, result.stdout, result.stderr)
        return result


def test_direct_shaper_records_every_host_before_shaping_and_restores_them():
    from emulation.shapers import DirectRecord, DirectShaper

    tb = FakeTestbed({"e0": FakeHost(MQ, MQ), "ep": FakeHost(FQ_CODEL, USER_FQ)})
    shaper = DirectShaper(cast(Testbed, tb))
    before = shaper.record()
    assert before == {"e0": {"eth0": MQ}, "ep": {"eth0": USER_FQ}}
    assert tb.state.get(qdisc.QdiscRecord) == qdisc.QdiscRecord(before) and tb.saved == 1
    for host in tb.hosts.values():  # what tcconfig's rules put there
        host.current = SHAPED
    tb.state.put(DirectRecord())
    shaper.stop()
    assert qdisc.normalize(tb.hosts["e0"].current) == qdisc.normalize(MQ)
    assert qdisc.normalize(tb.hosts["ep"].current) == qdisc.normalize(USER_FQ)
    assert tb.state.parts == {}


def test_direct_shaper_refuses_a_host_it_could_not_restore_before_touching_any():
    from emulation.shapers import DirectShaper

    tb = FakeTestbed({"e0": FakeHost(FQ_CODEL, FQ_CODEL), "ep": FakeHost(FQ_CODEL, SHAPED)})
    with pytest.raises(ConfigError, match="^ep: eth0 has qdiscs the testbed could not restore"):
        DirectShaper(cast(Testbed, tb)).record()
    assert tb.state.parts == {}
    assert all(c[2] == "show" for h in tb.hosts.values() for c in h.commands)


def test_direct_shaper_stop_tries_every_host_and_keeps_the_record_on_failure():
    from emulation.shapers import DirectRecord, DirectShaper

    tb = FakeTestbed(
        {"e0": FakeHost(FQ_CODEL, SHAPED, broken=True), "ep": FakeHost(FQ_CODEL, SHAPED)}
    )
    record = {"e0": {"eth0": FQ_CODEL}, "ep": {"eth0": FQ_CODEL}}
    tb.state.put(DirectRecord())
    tb.state.put(qdisc.QdiscRecord(record))
    with pytest.raises(qdisc.QdiscRestoreError, match="^e0: eth0 did not get its qdiscs back"):
        DirectShaper(cast(Testbed, tb)).stop()
    assert qdisc.normalize(tb.hosts["ep"].current) == qdisc.normalize(FQ_CODEL)  # still done
    assert tb.state.get(qdisc.QdiscRecord) == qdisc.QdiscRecord(record)  # for a second try
