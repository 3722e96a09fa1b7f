"""SSH host keys of inventory hosts: which keys a run trusts, decided before its first
connection, then enforced by ssh itself (StrictHostKeyChecking=yes against the run's own
known_hosts file).

Where the trusted keys come from, per host (``host_pattern``: ``addr`` or ``[addr]:port``):

1. the inventory's ``edgetb_known_hosts`` file when given: only that file; a host without
   a key there is an error;
2. else the user's known_hosts (``~/.ssh/known_hosts``, ``/etc/ssh/ssh_known_hosts``);
3. else the testbed's per-user store (``$EDGETB_HOME/known_hosts``), where the keys a host
   showed on first contact are recorded;
4. else (first contact) the keys the host shows now are recorded in that store — and
   every later run requires them.

A host showing none of its trusted keys is refused with an error naming it, both
fingerprints and how to forget the old key. Parsing, matching and deciding are pure;
``keyscan`` and ``trust`` run commands and write files.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .ssh import HostKeyError, RemoteHost, UnreachableError

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (key type, base64 key)
SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
USER_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
STORE_NAME = "known_hosts"  # in $EDGETB_HOME: keys recorded on first contact


def host_pattern(address: str, port: int) -> str:
    """How known_hosts names a host: ``addr`` on port 22, else ``[addr]:port``."""
    return address if port == 22 else f"[{address}]:{port}"


def _hashed_match(field: str, name: str) -> bool:
    """``|1|salt|hash`` (HashKnownHosts): HMAC-SHA1 of the name keyed with the salt."""
    try:
        _, magic, salt64, hash64 = field.split("|")
        if magic != "1":
            return False
        salt = base64.b64decode(salt64)
        expected = base64.b64decode(hash64)
    except ValueError:
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), expected)


def _pattern_match(name: str, pattern: str) -> bool:
    """OpenSSH's pattern match: ``*`` and ``?`` are wildcards, everything else (the
    brackets of ``[addr]:port`` included) is literal; host names are case-insensitive."""
    regex = "".join(
        ".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower()
    )
    return re.fullmatch(regex, name.lower(), flags=re.DOTALL) is not None


def _names_match(field: str, name: str) -> bool:
    """Whether the first field of a known_hosts line names ``name`` (comma-separated
    patterns with ``*``/``?``; a matching ``!pattern`` excludes)."""
    if field.startswith("|"):
        return _hashed_match(field, name)
    matched = False
    for pattern in field.split(","):
        negated = pattern.startswith("!")
        if _pattern_match(name, pattern[1:] if negated else pattern):
            if negated:
                return False
            matched = True
    return matched


def lookup(text: str, name: str) -> list[Key]:
    """The keys a known_hosts text lists for ``name`` (a ``host_pattern``), in order.
    ``@cert-authority`` and ``@revoked`` lines are not keys of the host: skipped."""
    keys: list[Key] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("@"):
            continue
        fields = line.split()
        if len(fields) < 3:
            continue
        if _names_match(fields[0], name) and (fields[1], fields[2]) not in keys:
            keys.append((fields[1], fields[2]))
    return keys


def revoked(text: str, name: str) -> set[Key]:
    """The keys ``@revoked`` lines of a known_hosts text revoke for ``name`` (OpenSSH
    refuses such a key whatever else trusts it)."""
    keys: set[Key] = set()
    for raw in text.splitlines():
        fields = raw.split()
        if len(fields) >= 4 and fields[0] == "@revoked" and _names_match(fields[1], name):
            keys.add((fields[2], fields[3]))
    return keys


def parse_keyscan(text: str) -> list[Key]:
    """Keys from ``ssh-keyscan`` output (``name type key`` lines; comments skipped)."""
    keys: list[Key] = []
    for line in text.splitlines():
        fields = line.split()
        if (
            len(fields) >= 3
            and not fields[0].startswith("#")
            and (fields[1], fields[2]) not in keys
        ):
            keys.append((fields[1], fields[2]))
    return keys


def fingerprint(key: Key) -> str:
    """OpenSSH's SHA256 fingerprint of a key, with its type: ``SHA256:... (ssh-ed25519)``."""
    digest = hashlib.sha256(base64.b64decode(key[1])).digest()
    return f"SHA256:{base64.b64encode(digest).decode().rstrip('=')} ({key[0]})"


def known_hosts_lines(name: str, keys: Iterable[Key], comment: str = "") -> str:
    return "".join(f"{name} {t} {k}{f' {comment}' if comment else ''}\n" for t, k in keys)


@dataclass(frozen=True)
class Decision:
    """What to do about one host: ``trust`` (its keys are known and it shows one of
    them), ``record`` (first contact: keep what it shows), ``changed`` or ``missing``."""

    action: str
    keys: tuple[Key, ...]  # the keys to write into the run's known_hosts
    source: str  # the file the known keys came from ("" on first contact)
    recorded: tuple[Key, ...] = ()


def decide(
    known: Sequence[tuple[str, Sequence[Key]]], shown: Sequence[Key], *, explicit: bool
) -> Decision:
    """Pure decision for one host. ``known``: (file, keys it lists for the host) in order
    of precedence; ``shown``: what the host offers now (ssh-keyscan). The first file that
    lists any key decides; ``explicit`` (a file named in the inventory) forbids first-contact
    recording."""
    for source, keys in known:
        if keys:
            matching = tuple(k for k in shown if k in keys)
            if matching:
                return Decision("trust", matching, source, tuple(keys))
            return Decision("changed", (), source, tuple(keys))
    if explicit:
        return Decision("missing", (), known[0][0] if known else "")
    return Decision("record", tuple(shown), "")


def keyscan(host: RemoteHost, timeout_s: float) -> list[Key]:
    """The host keys ``host`` offers (ssh-keyscan, retried until ``timeout_s``);
    UnreachableError naming the host when it offers none in time."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        proc = subprocess.run(
            ["ssh-keyscan", "-T", "5", "-p", str(host.port), host.address],
            capture_output=True,
            text=True,
            timeout=30,
        )
        keys = parse_keyscan(proc.stdout)
        if keys:
            return keys
        last = " ".join(line for line in proc.stderr.splitlines() if not line.startswith("#"))
        if time.monotonic() > deadline:
            raise UnreachableError(
                f"{host.name} ({host.address} port {host.port}): no SSH answer within "
                f"{timeout_s:.0f} s{f' ({last.strip()})' if last.strip() else ''}"
            )
        time.sleep(1.0)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def trust(
    hosts: Sequence[RemoteHost],
    *,
    run_file: Path,
    store: Path,
    explicit: Path | None = None,
    user_files: Sequence[Path] = (),
    timeout_s: float = 60.0,
) -> dict[str, dict]:
    """Decide each host's keys (see the module doc), write them to ``run_file`` (the only
    file ssh reads) and record first contacts in ``store``; returns per host the source
    and fingerprints. HostKeyError naming the first host that shows a different key or
    (``explicit``) has none; UnreachableError for one that does not answer."""
    sources = [explicit] if explicit is not None else [*user_files, store]
    # revocations count from every file, the user's too when the inventory names its own
    texts = {path: _read(path) for path in dict.fromkeys([*sources, *user_files, store])}
    lines = []
    report = {}
    for host in hosts:
        name = host_pattern(host.address, host.port)
        where = f"{host.name} ({host.address} port {host.port})"
        bad = {k: str(p) for p, text in texts.items() for k in revoked(text, name)}
        offered = keyscan(host, timeout_s)
        shown = [k for k in offered if k not in bad]
        if not shown:
            k = offered[0]
            raise HostKeyError(
                f"{where}: its host key {fingerprint(k)} is revoked (@revoked in {bad[k]}): refused"
            )
        d = decide(
            [(str(p), [k for k in lookup(texts[p], name) if k not in bad]) for p in sources],
            shown,
            explicit=bool(explicit),
        )
        _refuse_unless_trusted(d, host, where, shown)
        if d.action == "record":
            _record_first_contact(store, name, d.keys, host.name, where)
        lines.append(known_hosts_lines(name, d.keys, f"edgetb:{host.name}"))
        report[host.name] = {
            "source": d.source or f"first contact, recorded in {store}",
            "fingerprints": [fingerprint(k) for k in d.keys],
        }
    run_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    run_file.write_text("".join(lines))
    return report


def _refuse_unless_trusted(d: Decision, host: RemoteHost, where: str, shown: Sequence[Key]) -> None:
    """HostKeyError when decision ``d`` is that the host's key changed or, with an
    explicit file, is missing from it."""
    name = host_pattern(host.address, host.port)
    if d.action == "changed":
        raise HostKeyError(
            f"{where}: SSH host key changed: it shows "
            f"{', '.join(fingerprint(k) for k in shown)}; {d.source} trusts "
            f"{', '.join(fingerprint(k) for k in d.recorded)}. If the machine was "
            f"really reinstalled, forget the old key: ssh-keygen -R '{name}' -f {d.source}"
        )
    if d.action == "missing":
        raise HostKeyError(
            f"{where}: no host key in {d.source} (edgetb_known_hosts); it shows "
            f"{', '.join(fingerprint(k) for k in shown)}: add it after checking "
            f"(ssh-keyscan -p {host.port} {host.address} >> {d.source})"
        )


def _record_first_contact(
    store: Path, name: str, keys: Sequence[Key], host: str, where: str
) -> None:
    """The keys a host showed at first contact, appended to ``store`` (owner only)."""
    store.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(store, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, known_hosts_lines(name, keys, f"edgetb:{host}").encode())
    finally:
        os.close(fd)
    log.warning(
        "%s: first contact, trusting %s (recorded in %s; a later run refuses any other key)",
        where,
        ", ".join(fingerprint(k) for k in keys),
        store,
    )
