"""Recording and restoring an interface's qdiscs (testbed.qdisc): parsing, the restore
commands, and restore() against a fake host whose kernel acts like Linux's."""

import subprocess

import pytest

from testbed import qdisc
from testbed.errors import CommandError, ConfigError

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
