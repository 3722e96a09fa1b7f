"""The Dask side of a sweep on other machines, as ``api.execute`` runs it (the engine
beside ``scheduler.Sweep``): with ``--workers``, a scheduler of our own on TLS and a Dask
worker started on each machine over SSH (``fleet.Fleet.start``); with ``--scheduler``,
the user's cluster. The units go out through ``remote.Remote``."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from common.errors import ConfigError, TestbedError
from common.files import read_text

from ..plan import estimate
from ..settings.cells import Cell
from .controller import Remote
from .fleet import Fleet, WorkerLost

WORKER_TIMEOUT_S = 60.0  # a worker silent this long is removed (a scheduler: it leaves)
JOIN_WAIT_S = 120.0  # for the started workers to reach the scheduler
CONNECT_S = 10.0  # a --scheduler that does not answer in this time is an error
MAX_FRAMES = 1 << 16  # a Dask message of more frames than this is not one


def scheduler_security(address: str, insecure: bool) -> Any:
    """The distributed Security for ``--scheduler ADDRESS``: tls:// with the TLS files of
    Dask's own configuration (distributed.comm.tls.*: the CA, the client's certificate
    and key); tcp:// (anyone who reaches the scheduler runs code as root on its workers)
    only with ``--insecure-scheduler``. ConfigError (one line) otherwise."""
    from distributed.security import Security

    if address.startswith("tcp://"):
        if not insecure:
            raise ConfigError(
                f"--scheduler {address}: plain tcp:// lets whoever reaches the scheduler run "
                f"code as root on its workers; use tls:// (with Dask's TLS settings), or "
                f"add --insecure-scheduler on a network you trust"
            )
        return None
    security = Security()  # from dask's configuration (files, DASK_DISTRIBUTED__COMM__TLS__*)
    missing = [
        name
        for name, value in (
            ("ca-file", getattr(security, "tls_ca_file", None)),
            ("client.cert", getattr(security, "tls_client_cert", None)),
            ("client.key", getattr(security, "tls_client_key", None)),
        )
        if not value
    ]
    if missing:
        raise ConfigError(
            f"--scheduler {address}: tls:// needs Dask's TLS settings "
            f"(distributed.comm.tls.{', distributed.comm.tls.'.join(missing)}: "
            f"DASK_DISTRIBUTED__COMM__TLS__CA_FILE and the like)"
        )
    for name in ("tls_ca_file", "tls_client_cert", "tls_client_key"):
        read_text(getattr(security, name), f"Dask's TLS {name[4:].replace('_', ' ')}")
    return security


def probe_scheduler(address: str, security: Any = None, timeout_s: float = CONNECT_S) -> None:
    """ConfigError (one line) unless a Dask scheduler answers at ``address`` within
    ``timeout_s`` (asked who it is, with ``security``); for tcp://, first unless what
    answers may speak Dask (a frame count first: an SSH or HTTP banner read as one made
    Dask allocate exabytes). A server that accepts and then says nothing was a hang."""
    scheme, _, rest = address.partition("://")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"--scheduler {address}: the port must be 1..65535")
    t0 = time.monotonic()
    head = b""
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            if scheme == "tcp":
                sock.settimeout(0.5)
                try:
                    head = sock.recv(64)
                except TimeoutError:
                    pass  # silent until spoken to: Dask's server is
    except OSError as exc:
        raise ConfigError(
            f"--scheduler {address}: no answer within {timeout_s:g} s ({exc.strerror or exc})"
        ) from None
    if head and (len(head) < 8 or int.from_bytes(head[:8], "little") > MAX_FRAMES):
        shown = head.decode("ascii", "replace").strip()
        raise ConfigError(f"--scheduler {address}: not a Dask scheduler (it says {shown[:40]!r})")
    left = max(1.0, timeout_s - (time.monotonic() - t0))
    try:
        kind = asyncio.run(asyncio.wait_for(_identity(address, security, left), left))
    except Exception as exc:  # noqa: BLE001 - whatever it was, the scheduler did not answer
        why = "no answer" if isinstance(exc, TimeoutError) else type(exc).__name__
        raise ConfigError(
            f"--scheduler {address}: no Dask scheduler answered within {timeout_s:g} s ({why})"
        ) from None
    if kind != "Scheduler":
        raise ConfigError(f"--scheduler {address}: a Dask {kind}, not a scheduler")


async def _identity(address: str, security: Any, timeout_s: float) -> str:
    """What the Dask server at ``address`` says it is (its identity's type)."""
    from distributed.core import rpc

    args = security.get_connection_args("client") if security is not None else {}
    async with rpc(address, connection_args=args, timeout=timeout_s) as server:
        return str((await server.identity()).get("type"))


class DaskRun:
    """The sweep's engine (``run.engine.Engine``) for ``--workers`` (``specs``: the
    machines) or ``--scheduler`` (the address of a running Dask cluster), as
    ``run.engine.LocalEngine`` is for this machine; ``close`` ends what it started."""

    machines = "worker"

    def __init__(self, config, store, run_id, progress, specs, scheduler, worker_timeout):  # noqa: ANN001
        self.config, self.store, self.run_id, self.progress = config, store, run_id, progress
        self.specs, self.scheduler = specs, scheduler
        # the silence after which the scheduler drops a worker, and a worker its scheduler
        self.silence_s = worker_timeout or WORKER_TIMEOUT_S
        self.security: Any = None  # --scheduler tls://: scheduler_security's
        self.fleet = Fleet(specs, Path(config.out), run_id) if specs else None
        self.remote: Remote | None = None
        self.cluster: Any = None
        self.client: Any = None
        self.sessions: dict[str, subprocess.Popen] = {}
        self.on_cell: Any = None
        where = f"{len(specs)} workers" if specs else f"the Dask cluster {scheduler}"
        self.intro = f"on {where}"

    def hold(self) -> AbstractContextManager[Any]:
        return nullcontext()  # the figures are drawn here, the cells measured elsewhere

    def run(self, todo: list[Cell]) -> None:
        if not todo:
            return
        import dask
        from distributed import Client

        ttl = f"{self.silence_s:g}s"
        with dask.config.set({"distributed.scheduler.worker-ttl": ttl}):
            if self.fleet is not None:
                self.fleet.trust_host_keys()
                ready = self.fleet.provision(
                    say, ycsb=bool(self.config.ycsb_workloads()), shaper=self.config.shaper
                )
                self.start_workers(list(ready))
            else:
                try:
                    self.client = Client(self.scheduler, timeout=CONNECT_S, security=self.security)
                except (OSError, TimeoutError, ValueError) as exc:
                    raise WorkerLost(f"no Dask scheduler at {self.scheduler}: {exc}") from exc
            self.remote = Remote(
                self.config,
                self.store,
                self.run_id,
                self.progress,
                self.client,
                fleet=self.fleet,
                sessions=self.sessions,
            )
            self.remote.on_cell = self.on_cell
            self.remote.run(todo)

    def start_workers(self, names: list[str]) -> None:
        """A scheduler of our own on TLS (certificates made for this run), and ``serve`` on
        each worker over SSH; those that do not join in JOIN_WAIT_S are left out."""
        from distributed import Client, LocalCluster
        from distributed.security import Security

        fleet, config = self.fleet, self.config
        assert fleet is not None
        security = Security.temporary()
        host = contact_address(fleet.specs[names[0]].host.address)
        self.cluster = LocalCluster(
            n_workers=0,
            protocol="tls://",
            host=host,
            scheduler_port=0,
            dashboard_address="127.0.0.1:0",  # no one else needs it: not on the network
            security=security,
        )
        self.client = Client(self.cluster, security=security)
        address = self.cluster.scheduler_address
        say(f"Dask scheduler {address}, dashboard {self.cluster.dashboard_link}")
        setup = {
            "scheduler": address,
            "ca": security.tls_ca_file,
            "cert": security.tls_worker_cert,
            "key": security.tls_worker_key,
            "config": config.to_dict(),
            "run_id": self.run_id,
            "silence_s": self.silence_s,
            "links": Path(config.links_file).read_text() if config.links_file else None,
        }
        logs = Path(config.out) / "logs"
        for n in names:
            own = {**setup, "host": fleet.specs[n].host.address}  # where it listens
            self.sessions[n] = fleet.start(n, own, logs / f"{self.run_id}-worker-{n}.log")
        deadline = time.monotonic() + JOIN_WAIT_S
        while time.monotonic() < deadline:
            joined = {str(w.get("name")) for w in self.client.scheduler_info()["workers"].values()}
            if joined >= set(names) or all(p.poll() is not None for p in self.sessions.values()):
                break
            time.sleep(0.5)
        for n in [n for n in names if n not in joined]:
            say(f"worker left out: {n}: did not join the scheduler (see its log)")
            self.sessions.pop(n).kill()
        if not self.sessions:
            raise WorkerLost("no worker joined the scheduler")

    def remaining_s(self, scale: float) -> float:
        return self.remote.remaining_s(scale) if self.remote is not None else 0.0

    def close(self) -> None:
        for proc in self.sessions.values():  # the end of its input: the worker stops
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for part in (self.client, self.cluster, self.fleet):
            if part is not None:
                part.close()

    def report(self, todo: list[Cell], wall: float, busy: float | None = None) -> str:
        per = self.store.cells_per_worker(self.run_id)
        return f"\n{len(todo)} cells in {estimate.fmt_duration(wall)} on " + ", ".join(
            f"{w}: {n} cells" for w, n in per.items()
        )


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def contact_address(host: str) -> str:
    """This machine's address as seen from ``host`` (the route the kernel picks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((socket.gethostbyname(host), 9))
            return str(s.getsockname()[0])
        except OSError as exc:
            raise TestbedError(f"no route from this machine to the worker {host}: {exc}") from exc
