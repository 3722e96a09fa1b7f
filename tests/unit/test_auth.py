"""Cassandra authentication on remote backends: the settings layer as rendered, JVM
arguments (system_auth RF, JMX on loopback only), the run's credentials file, the CQL
that replaces the default superuser, and how the client reads the login."""

import os
import stat
from pathlib import Path

import pytest
import yaml

from testbed import CassandraSettings, ConfigError, StateError, Topology
from testbed.cassandra import auth, config, jvm


def _yaml(tmp_path, **kw):
    topo = Topology(edge_nodes=3)
    values = config.node_settings(CassandraSettings(), topo, topo.host("e1"), tmp_path, **kw)
    return yaml.safe_load(config.render_yaml(values))


def test_rendered_yaml_with_auth(tmp_path):
    rendered = _yaml(tmp_path, auth=True)
    assert rendered["authenticator"] == "PasswordAuthenticator"
    assert rendered["authorizer"] == "CassandraAuthorizer"
    assert rendered["role_manager"] == "CassandraRoleManager"
    # no measured request waits for a system_auth read: refreshed in the background
    for cache in ("roles", "permissions"):
        assert rendered[f"{cache}_validity"] == "1h"
        assert rendered[f"{cache}_update_interval"] == "60s"
    # logins stop working within seconds of a role's removal
    assert "credentials_validity" not in rendered
    assert rendered["listen_address"] == "10.77.0.12"  # everything else as before


def test_without_auth_nothing_changes(tmp_path):
    rendered = _yaml(tmp_path)
    assert rendered["authenticator"] == "AllowAllAuthenticator"
    assert rendered["authorizer"] == "AllowAllAuthorizer"
    assert "roles_validity" not in rendered


def test_auth_layer_wins_and_overrides_of_it_are_refused(tmp_path):
    topo = Topology(edge_nodes=1)
    settings = CassandraSettings(overrides={"authenticator": "AllowAllAuthenticator"})
    values = config.node_settings(settings, topo, topo.host("e0"), tmp_path, auth=True)
    assert values["authenticator"] == "PasswordAuthenticator"
    with pytest.raises(ConfigError, match="authenticator: set by the testbed on the hosts"):
        auth.check_overrides(settings.overrides, "hosts")
    auth.check_overrides({"roles_validity": "10s"}, "hosts")  # tuning stays allowed


def _jvm(**kw):
    return jvm.jvm_args(
        settings=CassandraSettings(build="stock"),  # the classpath below is stock's
        classpath="/lib/a.jar",
        node_dir=Path("/run/x/nodes/e0"),
        run_id="abc123",
        host="e0",
        **kw,
    )


def test_jvm_args_system_auth_rf_and_local_jmx_only():
    args = _jvm(system_auth_rf=3)
    assert "-Dcassandra.system_auth.default_rf=3" in args
    assert args.index("-Dcassandra.system_auth.default_rf=3") < args.index("-cp")
    assert not any("system_auth" in a for a in _jvm())
    # JMX: Cassandra's own local-only server (loopback, like LOCAL_JMX=yes), never the
    # JDK agent on every interface, never a remote port
    assert "-Dcassandra.jmx.local.port=7199" in args
    assert not any(
        a.startswith(("-Dcom.sun.management.jmxremote", "-Dcassandra.jmx.remote.port"))
        for a in args
    )
    with pytest.raises(ConfigError):
        auth.system_auth_properties(0)


def test_nodetool_talks_to_the_local_jmx_port():
    args = jvm.nodetool_args("/lib/a.jar", Path("/l.xml"), "status")
    assert args[-5:] == ["-h", "127.0.0.1", "-p", "7199", "status"]


def test_credentials_file_is_0600_even_with_a_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        path = auth.write(tmp_path / "credentials.json", auth.generate("ab12cd"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    creds = auth.read(path)
    assert creds.username == "edgetb_ab12cd" and len(creds.password) >= 32
    assert creds.password not in repr(creds)
    with pytest.raises(StateError, match="exists already"):
        auth.write(path, creds)  # never overwritten


def test_passwords_differ_per_run():
    assert auth.generate("ab12cd").password != auth.generate("ab12cd").password


def test_credentials_readable_by_others_or_through_a_symlink_are_refused(tmp_path):
    path = auth.write(tmp_path / "c.json", auth.generate("ab12cd"))
    link = tmp_path / "link.json"
    link.symlink_to(path)
    with pytest.raises(StateError, match="cannot open"):
        auth.read(link)
    path.chmod(0o644)
    with pytest.raises(StateError, match="mode 0644"):
        auth.read(path)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    bad.chmod(0o600)
    with pytest.raises(StateError, match="not a credentials file"):
        auth.read(bad)
    with pytest.raises(StateError, match="cannot open"):
        auth.read(tmp_path / "missing.json")


def test_role_cql():
    creds = auth.Credentials("edgetb_ab12cd", "p'w")
    assert auth.create_role_cql(creds) == (
        "CREATE ROLE IF NOT EXISTS edgetb_ab12cd WITH PASSWORD = 'p''w' "
        "AND SUPERUSER = true AND LOGIN = true"
    )
    assert auth.DROP_DEFAULT_ROLE_CQL == "DROP ROLE IF EXISTS cassandra"
    with pytest.raises(ConfigError):
        auth.create_role_cql(auth.Credentials("x; DROP", "p"))
    with pytest.raises(ConfigError):
        auth.role_name("ab-12")


def test_client_reads_the_login_from_the_file_named_in_the_environment(tmp_path, monkeypatch):
    from testbed import client

    monkeypatch.delenv(auth.ENV, raising=False)
    assert client.credentials() is None and client.auth_provider() is None
    path = auth.write(tmp_path / "c.json", auth.Credentials("edgetb_ab12cd", "secret"))
    monkeypatch.setenv(auth.ENV, str(path))
    provider = client.auth_provider()
    assert provider.username == "edgetb_ab12cd" and provider.password == "secret"


def test_auth_refused_tells_bad_logins_from_other_failures():
    from cassandra import AuthenticationFailed, OperationTimedOut
    from cassandra.cluster import NoHostAvailable

    from testbed.client import auth_refused

    bad = AuthenticationFailed("Bad credentials")
    assert auth_refused(NoHostAvailable("x", {"10.77.0.11:9042": bad}))
    assert not auth_refused(
        NoHostAvailable("x", {"10.77.0.11:9042": bad, "10.77.0.12:9042": OperationTimedOut()})
    )
    assert not auth_refused(NoHostAvailable("x", {}))
    assert not auth_refused(OSError("connection refused"))


class FakeCassandra:
    """Logins as Cassandra answers them: the default role appears after a few attempts
    (each node makes it ~10 s after its start); a dropped role is still accepted for a
    few attempts per node (its credentials cache entry)."""

    def __init__(self, points, *, default_after=3, cached_for=2):
        self.points = points
        self.roles: dict[str, str] = {}
        self.attempts = 0
        self.default_after = default_after
        self.cached = {}  # point -> logins still accepted for the dropped default
        self.cached_for = cached_for
        self.statements: list[str] = []
        self.request_timeouts: list[float] = []  # of the sessions each statement ran on

    def connect(self, points, timeout_s, creds=None):
        from types import SimpleNamespace

        from cassandra import AuthenticationFailed
        from cassandra.cluster import NoHostAvailable

        self.attempts += 1
        if self.attempts > self.default_after and not self.statements:
            self.roles.setdefault("cassandra", "cassandra")
        user, password = creds.username, creds.password
        ok = self.roles.get(user) == password
        if user == "cassandra" and not ok and self.cached.get(points[0], 0) > 0:
            self.cached[points[0]] -= 1
            ok = True
        if not ok:
            raise NoHostAvailable(
                "Unable to connect to any servers",
                {f"{p}:9042": AuthenticationFailed("Bad credentials") for p in points},
            )
        session = SimpleNamespace(execute=lambda cql: self.execute(cql, timeout_s))
        return SimpleNamespace(shutdown=lambda: None), session

    def execute(self, cql, timeout_s=None):
        self.statements.append(cql)
        self.request_timeouts.append(timeout_s)
        if cql.startswith("CREATE ROLE IF NOT EXISTS"):
            name = cql.split()[5]
            self.roles.setdefault(name, cql.split("PASSWORD = '")[1].split("'")[0])
        elif cql == auth.DROP_DEFAULT_ROLE_CQL:
            self.roles.pop("cassandra", None)
            self.cached = {p: self.cached_for for p in self.points}


POINTS = ["10.77.0.11", "10.77.0.12"]


@pytest.fixture
def fake(monkeypatch):
    """A FakeCassandra of two nodes behind testbed.client's connect, without waiting."""
    from testbed import client

    fake = FakeCassandra(POINTS)
    monkeypatch.setattr(client, "connect", fake.connect)
    monkeypatch.setattr(client.time, "sleep", lambda s: None)
    return fake


def test_auth_setup_replaces_the_default_superuser(fake):
    from testbed import client

    points = POINTS
    creds = auth.generate("ab12cd")
    result = client.auth_setup(points, 30, creds)
    assert result["role"] == "edgetb_ab12cd" and result["created"] is True
    assert result["default_refused_by"] == points
    assert fake.roles == {"edgetb_ab12cd": creds.password}  # cassandra is gone
    assert fake.statements == [auth.create_role_cql(creds), auth.DROP_DEFAULT_ROLE_CQL]
    assert all(n == 0 for n in fake.cached.values())  # waited out every node's cache
    # run again (e.g. a retried stage): the run's role logs in, nothing is created
    again = client.auth_setup(points, 30, creds)
    assert again["created"] is False and fake.roles == {"edgetb_ab12cd": creds.password}


def test_auth_setup_gives_up_at_its_deadline_with_the_reason(monkeypatch):
    from testbed import client

    fake = FakeCassandra(["10.77.0.11"], default_after=10**9)  # the default never appears
    monkeypatch.setattr(client, "connect", fake.connect)
    clock = iter(range(0, 10**6, 5))
    monkeypatch.setattr(client.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(client.time, "sleep", lambda s: None)
    with pytest.raises(client.ClientError, match="no login as the default superuser within 30 s"):
        client.auth_setup(["10.77.0.11"], 30, auth.generate("ab12cd"))


def test_the_schema_changes_get_what_is_left_of_the_stage_not_ten_seconds(fake):
    """A slow guest beside other work took over 10 s to agree on CREATE ROLE: the
    sessions that change the schema time their requests by the stage's deadline
    (connect() still caps each connection attempt at 10 s)."""
    from testbed import client

    client.auth_setup(POINTS, 400, auth.generate("ab12cd"))
    assert len(fake.request_timeouts) == len(fake.statements) == 2
    assert min(fake.request_timeouts) > 300, fake.request_timeouts


def test_a_replica_that_misses_the_servers_write_timeout_gets_another_try(fake, monkeypatch):
    """CI: a replica in a slow guest did not answer CREATE ROLE within the coordinator's
    write timeout; the statements are idempotent and tried again until the deadline."""
    from cassandra import WriteTimeout

    from testbed import client

    execute = fake.execute
    failures: list[str] = []

    def flaky(cql, timeout_s=None):
        if cql.startswith("CREATE ROLE") and not failures:
            failures.append(cql)
            raise WriteTimeout("Operation timed out - received only 1 responses.", write_type=0)
        execute(cql, timeout_s)

    monkeypatch.setattr(fake, "execute", flaky)
    creds = auth.generate("ab12cd")
    assert client.auth_setup(POINTS, 30, creds)["created"] is True
    assert failures and fake.roles == {"edgetb_ab12cd": creds.password}


def test_on_sites_system_auth_is_replicated_per_datacenter_before_the_role_exists(fake):
    from testbed import client

    creds = auth.generate("ab12cd")
    client.auth_setup(POINTS, 30, creds, client.per_dc_counts("dc1=1,dc2=1"))
    alter = (
        "ALTER KEYSPACE system_auth WITH replication = "
        "{'class': 'NetworkTopologyStrategy', 'dc1': 1, 'dc2': 1}"
    )  # before the run's role is written and read at LOCAL_QUORUM
    assert fake.statements == [alter, auth.create_role_cql(creds), auth.DROP_DEFAULT_ROLE_CQL]
    for bad in ("dc1", "dc1=0", "=2", "dc1=two"):
        with pytest.raises(ValueError, match="DC=N"):
            client.per_dc_counts(bad)
