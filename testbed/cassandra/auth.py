"""Cassandra authentication on remote backends (VMs, inventory hosts): the settings layer,
the run's credentials and the CQL that replaces the default superuser.

The flow (``Testbed`` and ``testbed.client auth-setup``):

1. every node starts with PasswordAuthenticator + CassandraAuthorizer and with
   ``system_auth`` created at RF = number of nodes (``-Dcassandra.system_auth.default_rf``);
2. about 10 s after its start each node creates the default superuser ``cassandra`` /
   ``cassandra`` (``CassandraRoleManager.setupDefaultRole``, written at QUORUM, unless
   a role exists already);
3. from the endpoint, logged in as ``cassandra``, the run's own superuser role is created
   with a password generated for this run; logged in as that role, ``cassandra`` is
   dropped; then every node is checked to refuse ``cassandra`` / ``cassandra``.

The credentials live in ``<run dir>/credentials.json`` (mode 0600) on the controller and
at the same path on the endpoint (copied by the ``cassandra`` playbook over SSH); tools
find the file through ``$EDGETB_CREDENTIALS`` (a path, never the password itself, so
nothing secret appears on a command line).

This module is pure apart from ``write``/``read`` and imports nothing beyond the standard
library: the endpoint's client imports it.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError, StateError

FILE_NAME = "credentials.json"
ENV = "EDGETB_CREDENTIALS"
DEFAULT_USER = "cassandra"
DEFAULT_PASSWORD = "cassandra"

# The per-request permission check of a superuser reads its role (roles cache) and its
# permissions (permissions cache). With Cassandra's defaults (validity = update interval
# = 2 s) an entry expires and the next request *waits* for a LOCAL_QUORUM read of
# system_auth across the emulated links: every ~2 s one measured write per coordinator
# would pay an extra round trip. A long validity with a shorter update interval makes
# Caffeine refresh in the background (refreshAfterWrite < expireAfterWrite): no request
# waits after the first. Credentials (checked at login only) keep the 2 s default, so a
# dropped role stops logging in within seconds.
AUTH_SETTINGS: dict[str, Any] = {
    "authenticator": "PasswordAuthenticator",
    "authorizer": "CassandraAuthorizer",
    "role_manager": "CassandraRoleManager",
    "roles_validity": "1h",
    "roles_update_interval": "60s",
    "permissions_validity": "1h",
    "permissions_update_interval": "60s",
}
AUTH_KEYS = frozenset({"authenticator", "authorizer", "role_manager"})


def check_overrides(overrides: Mapping[str, Any], backend: str) -> None:
    """ConfigError when cassandra.yaml overrides would change who may log in."""
    taken = sorted(AUTH_KEYS & set(overrides))
    if taken:
        raise ConfigError(
            f"{', '.join(taken)}: set by the testbed on the {backend} backend "
            f"(PasswordAuthenticator, CassandraAuthorizer); remove the override"
        )


def system_auth_properties(nodes: int) -> list[str]:
    """JVM properties that create ``system_auth`` with one replica per node.

    With Cassandra's default RF 1 each role lives on one node: losing that node loses
    every login. RF = node count keeps logins (read at LOCAL_QUORUM; the default
    superuser at QUORUM) working while a majority is up, and the table is tiny.
    """
    if nodes < 1:
        raise ConfigError(f"system_auth needs at least one node, got {nodes}")
    return [f"-Dcassandra.system_auth.default_rf={nodes}"]


@dataclass(frozen=True)
class Credentials:
    """A CQL login. The password never appears in ``repr``."""

    username: str
    password: str = field(repr=False)

    def to_json(self) -> str:
        return json.dumps({"username": self.username, "password": self.password})


def role_name(run_id: str) -> str:
    if not run_id.isalnum():
        raise ConfigError(f"invalid run id {run_id!r}")
    return f"edgetb_{run_id.lower()}"


def generate(run_id: str) -> Credentials:
    """The run's own superuser: ``edgetb_<run>`` with 32 random URL-safe characters."""
    return Credentials(role_name(run_id), secrets.token_urlsafe(24))


def write(path: Path, creds: Credentials) -> Path:
    """Create ``path`` with mode 0600 (never widened by the umask, never through a
    symlink, never over an existing file) holding ``creds``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError as exc:
        raise StateError(f"credentials file exists already: {path}") from exc
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, creds.to_json().encode())
    finally:
        os.close(fd)
    return path


def read(path: str | os.PathLike) -> Credentials:
    """The credentials in ``path``; StateError when it is missing, not a regular file,
    readable by group or others, or not a credentials file."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise StateError(f"cannot open credentials file {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError(f"credentials file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise StateError(
                f"credentials file {path} has mode {stat.S_IMODE(st.st_mode):04o}; "
                f"it must be readable by its owner only (0600)"
            )
        data = os.read(fd, 65536)
    finally:
        os.close(fd)
    try:
        obj = json.loads(data)
        return Credentials(str(obj["username"]), str(obj["password"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise StateError(f"{path} is not a credentials file") from exc


def cql_literal(text: str) -> str:
    """``text`` as a CQL string literal (single quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def create_role_cql(creds: Credentials) -> str:
    """CREATE ROLE for the run's superuser (CQL role options take literals, not binds)."""
    if not creds.username.replace("_", "").isalnum():
        raise ConfigError(f"invalid role name {creds.username!r}")
    return (
        f"CREATE ROLE IF NOT EXISTS {creds.username} WITH PASSWORD = "
        f"{cql_literal(creds.password)} AND SUPERUSER = true AND LOGIN = true"
    )


DROP_DEFAULT_ROLE_CQL = f"DROP ROLE IF EXISTS {DEFAULT_USER}"
