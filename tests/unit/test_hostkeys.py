"""SSH host keys of inventory hosts: known_hosts parsing (hashed entries included),
fingerprints, the trust decision, and what `trust` writes and refuses. ssh-keyscan is
replaced by a fake: no network."""

import re
import stat

import pytest

from testbed.backends import hostkeys, ssh
from testbed.backends.ssh import HostKeyError, RemoteHost, UnreachableError

# Two ed25519 keys made with ssh-keygen; fingerprints as `ssh-keygen -lf` printed them.
K1 = ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIIrEtFuV36UBhdrOItGFUqgjy11CrbP2U4X8XOtIgEOT")
K2 = ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIDnEgckaFll52FvSyMoZhNAV0/2Ws8DJGLMXyHf1rDr/")
FP1 = "SHA256:BMNll+4lDqZ8JcGBqW3O7cZd5gzFyCdHABrYYOvHO4M"
FP2 = "SHA256:Jo2FOIj1YUKw0HHxVpFL0896fOtmcRj0PvpkTZ2oR0U"
# `ssh-keygen -H` of "10.77.0.11 K1" and "[10.77.0.12]:2222 K2"
HASHED = (
    "|1|dNlB5vyjjinq2xKZ+QshdpKO4Fs=|n7lgVAkL0Zosm33giz00Tf1kY+s= " + " ".join(K1) + "\n"
    "|1|eAn0unCoi9IYFbx4+lBmqgRRX3M=|GUAYJ//Iq0AKTj/m9oROFyWG2Eg= " + " ".join(K2) + "\n"
)


def test_host_pattern_brackets_only_other_ports():
    assert hostkeys.host_pattern("10.77.0.11", 22) == "10.77.0.11"
    assert hostkeys.host_pattern("10.77.0.11", 2222) == "[10.77.0.11]:2222"


def test_fingerprints_are_openssh_ones():
    assert hostkeys.fingerprint(K1) == f"{FP1} (ssh-ed25519)"
    assert hostkeys.fingerprint(K2) == f"{FP2} (ssh-ed25519)"


def test_lookup_reads_hashed_entries():
    assert hostkeys.lookup(HASHED, "10.77.0.11") == [K1]
    assert hostkeys.lookup(HASHED, "[10.77.0.12]:2222") == [K2]
    assert hostkeys.lookup(HASHED, "10.77.0.12") == []  # port 22 is another entry
    assert hostkeys.lookup(HASHED, "10.77.0.13") == []


def test_lookup_plain_patterns_wildcards_negation_and_markers():
    text = "\n".join(
        [
            "# a comment",
            "",
            f"10.77.0.11,board-a {' '.join(K1)} old board",
            f"10.77.0.* {' '.join(K2)}",
            f"10.78.0.*,!10.78.0.5 {' '.join(K1)}",
            f"@cert-authority 10.77.0.* {' '.join(K2)}",
            f"@revoked 10.77.0.20 {' '.join(K1)}",
            "broken-line",
        ]
    )
    assert hostkeys.lookup(text, "10.77.0.11") == [K1, K2]
    assert hostkeys.lookup(text, "10.77.0.20") == [K2]  # marker lines are not host keys
    assert hostkeys.lookup(text, "10.78.0.4") == [K1]
    assert hostkeys.lookup(text, "10.78.0.5") == []  # negated
    assert hostkeys.lookup(text, "[10.77.0.11]:2222") == []


def test_keyscan_output_parsed():
    out = "# 10.77.0.11:22 SSH-2.0-OpenSSH_9.2\n" + "".join(
        f"10.77.0.11 {' '.join(k)}\n" for k in (K1, K2)
    )
    assert hostkeys.parse_keyscan(out) == [K1, K2]


@pytest.mark.parametrize(
    "known, shown, explicit, action, keys",
    [
        ([("user", [K1]), ("store", [])], [K1, K2], False, "trust", (K1,)),
        ([("user", []), ("store", [K2])], [K1, K2], False, "trust", (K2,)),
        ([("user", [K1]), ("store", [K2])], [K2], False, "changed", ()),  # user file decides
        ([("user", []), ("store", [])], [K1, K2], False, "record", (K1, K2)),
        ([("given", [])], [K1], True, "missing", ()),
        ([("given", [K2])], [K1], True, "changed", ()),
        ([("given", [K1])], [K1], True, "trust", (K1,)),
    ],
)
def test_decide(known, shown, explicit, action, keys):
    d = hostkeys.decide(known, shown, explicit=explicit)
    assert (d.action, d.keys) == (action, keys)


@pytest.fixture
def scan(monkeypatch):
    """ssh-keyscan replaced: the keys each address offers."""
    offers: dict[str, list] = {}

    def fake(host, timeout_s):
        if not offers.get(host.address):
            raise UnreachableError(f"{host.name} ({host.address}): no SSH answer")
        return offers[host.address]

    monkeypatch.setattr(hostkeys, "keyscan", fake)
    return offers


E0 = RemoteHost("e0", "192.168.1.20", "pi", 22)
EP = RemoteHost("ep", "192.168.1.30", "pi", 2222)


def test_first_contact_recorded_in_run_and_store_then_enforced(tmp_path, scan):
    scan.update({E0.address: [K1], EP.address: [K2]})
    run_file, store = tmp_path / "run" / "known_hosts", tmp_path / "home" / "known_hosts"
    report = hostkeys.trust([E0, EP], run_file=run_file, store=store)
    assert report["e0"]["fingerprints"] == [f"{FP1} (ssh-ed25519)"]
    assert "first contact" in report["e0"]["source"]
    run_text = run_file.read_text()
    assert hostkeys.lookup(run_text, "192.168.1.20") == [K1]
    assert hostkeys.lookup(run_text, "[192.168.1.30]:2222") == [K2]
    assert hostkeys.lookup(store.read_text(), "192.168.1.20") == [K1]
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    # a later run: same keys are trusted from the store, nothing appended
    size = store.stat().st_size
    report = hostkeys.trust([E0, EP], run_file=tmp_path / "run2" / "kh", store=store)
    assert report["e0"]["source"] == str(store) and store.stat().st_size == size
    # e0 reinstalled (or someone else on its address): refused, named, with both keys
    scan[E0.address] = [K2]
    with pytest.raises(HostKeyError) as err:
        hostkeys.trust([E0, EP], run_file=tmp_path / "run3" / "kh", store=store)
    text = str(err.value)
    assert text.startswith("e0 (192.168.1.20 port 22): SSH host key changed")
    assert FP2 in text and FP1 in text and str(store) in text and "\n" not in text


def test_user_known_hosts_wins_and_an_edited_store_entry_is_refused(tmp_path, scan):
    scan.update({E0.address: [K1]})
    user = tmp_path / "user_known_hosts"
    user.write_text(HASHED.replace("10.77.0.11", "x"))  # hashed for 10.77.0.11, not E0
    store = tmp_path / "store"
    store.write_text(f"192.168.1.20 {' '.join(K2)} edgetb:e0\n")  # the record, edited
    with pytest.raises(HostKeyError, match="e0 .* SSH host key changed"):
        hostkeys.trust([E0], run_file=tmp_path / "kh", store=store, user_files=[user])
    user.write_text(f"192.168.1.20 {' '.join(K1)}\n")  # the user's own file decides
    report = hostkeys.trust([E0], run_file=tmp_path / "kh", store=store, user_files=[user])
    assert report["e0"]["source"] == str(user)


def test_explicit_file_only_and_no_first_contact(tmp_path, scan):
    scan.update({E0.address: [K1], EP.address: [K2]})
    given = tmp_path / "given"
    given.write_text(f"192.168.1.20 {' '.join(K1)}\n")
    store = tmp_path / "store"
    with pytest.raises(HostKeyError, match=r"ep \(192.168.1.30 port 2222\): no host key in"):
        hostkeys.trust([E0, EP], run_file=tmp_path / "kh", store=store, explicit=given)
    assert not store.exists()  # nothing recorded on the way


def test_a_revoked_key_is_never_trusted_whoever_lists_it(tmp_path, scan):
    """``@revoked`` lines (in any file read: the user's, the store, the inventory's own)
    revoke a key for the hosts they name; skipped before, a revoked key was trusted."""
    scan.update({E0.address: [K1], EP.address: [K2]})
    user = tmp_path / "user"
    user.write_text(f"@revoked * {' '.join(K1)}\n192.168.1.20 {' '.join(K1)}\n")
    store = tmp_path / "store"
    assert hostkeys.revoked(user.read_text(), "192.168.1.20") == {K1}
    with pytest.raises(
        HostKeyError, match=re.escape(f"e0 (192.168.1.20 port 22): its host key {FP1}")
    ):
        hostkeys.trust([E0], run_file=tmp_path / "kh", store=store, user_files=[user])
    assert not store.exists()  # not recorded as a first contact either
    # the inventory names its own file: the user's revocation still counts
    given = tmp_path / "given"
    given.write_text(f"192.168.1.20 {' '.join(K1)}\n")
    with pytest.raises(HostKeyError, match="revoked"):
        hostkeys.trust(
            [E0], run_file=tmp_path / "kh", store=store, explicit=given, user_files=[user]
        )
    # a host offering a good key beside the revoked one is trusted with the good one only
    scan[E0.address] = [K1, K2]
    user.write_text(f"@revoked 192.168.1.20 {' '.join(K1)}\n192.168.1.20 {' '.join(K2)}\n")
    report = hostkeys.trust([E0], run_file=tmp_path / "kh", store=store, user_files=[user])
    assert report["e0"]["fingerprints"] == [f"{FP2} (ssh-ed25519)"]
    assert hostkeys.lookup((tmp_path / "kh").read_text(), "192.168.1.20") == [K2]


def test_unreachable_host_named(tmp_path, scan):
    with pytest.raises(UnreachableError, match="e0"):
        hostkeys.trust([E0], run_file=tmp_path / "kh", store=tmp_path / "store")


def test_ssh_settings_strict_for_inventory_hosts(tmp_path):
    strict = ssh.SSH("abc123", tmp_path, strict=True).settings()
    assert "StrictHostKeyChecking=yes" in strict
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in strict
    assert "GlobalKnownHostsFile=/dev/null" in strict
    vms = ssh.SSH("abc123", tmp_path).settings()
    assert "StrictHostKeyChecking=accept-new" in vms


def test_host_key_failures_recognised():
    assert ssh.host_key_refused("Host key verification failed.\r\n")
    assert ssh.host_key_refused(
        "@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@\n"
        "Host key for 10.0.0.1 has changed and you have requested strict checking."
    )
    assert not ssh.host_key_refused("ssh: connect to host 10.0.0.1 port 22: No route to host")


def test_brackets_are_literal_not_a_character_class():
    text = f"[10.77.0.1]:2222 {' '.join(K1)}\n"
    assert hostkeys.lookup(text, "[10.77.0.1]:2222") == [K1]
    assert hostkeys.lookup(text, "1") == []  # fnmatch would read [10.77.0.1] as a class
    assert hostkeys.lookup(f"Board-A {' '.join(K1)}\n", "board-a") == [K1]
