"""The machines of ``python -m experiments.sweep … --workers INVENTORY``: the Ansible
inventory read and checked (``load_workers``), and the ``Fleet`` that provisions them
(ansible-runner, ``testbed/playbooks/worker.yml``: the project's code in the worker's
directory, its Python environment and Cassandra where missing, then ``python -m
experiments.remote.worker probe``; a machine that fails is left out, named), starts one Dask
worker on each over SSH (``start``), and removes what a dead one left (``command``).
The sweep's cells go to those workers through Dask: ``experiments.remote.controller``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import posixpath
import re
import shlex
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import ConfigError, TestbedError
from common.files import append_to
from testbed.backends import hostkeys, provision
from testbed.backends.hostkeys import STORE_NAME, USER_KNOWN_HOSTS
from testbed.backends.inventory import read_inventory, validate_inventory
from testbed.backends.ssh import SSH, RemoteHost
from testbed.state import home


class WorkerLost(TestbedError):
    """Every worker is gone with cells left, or a unit failed on two workers."""


@dataclass(frozen=True)
class WorkerSpec:
    """One machine (or one directory on a machine) of ``--workers``."""

    name: str
    host: RemoteHost
    key: Path
    known_hosts: Path | None
    dir: str  # edgetb_worker_dir: code, staging results, logs
    home: str  # edgetb_home: the worker's EDGETB_HOME
    python: str | None  # edgetb_python: an interpreter with the project's dependencies
    subnet_pool: str | None
    parallel: str
    interpreter: str  # Ansible's python on the machine

    @property
    def src(self) -> str:
        return f"{self.dir}/src"

    @property
    def py(self) -> str:
        return self.python or f"{self.dir}/venv/bin/python"

    def env(self) -> list[str]:
        out = [f"EDGETB_HOME={self.home}", f"PYTHONPATH={self.src}"]
        if self.subnet_pool:
            out.append(f"EDGETB_SUBNET_POOL={self.subnet_pool}")
        return out


# A worker's name names its logs and Ansible directories under the results
WORKER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
SAFE_PATH_RE = re.compile(r"/[A-Za-z0-9_./+-]*")
# Directories a worker's own may not be (its set-up makes it 0700 and writes below it),
# nor be inside (the kernel's and devices' file systems)
SYSTEM_DIRS = frozenset(
    "/ /bin /boot /dev /etc /home /lib /lib32 /lib64 /libx32 /media /mnt /opt /proc /root "
    "/run /sbin /snap /srv /sys /tmp /usr /var /usr/bin /usr/lib /usr/lib64 /usr/local "
    "/usr/local/bin /usr/local/lib /usr/sbin /usr/share /usr/src /var/cache /var/lib "
    "/var/local /var/log /var/mail /var/opt /var/run /var/spool /var/tmp".split()
)
KERNEL_DIRS = ("/proc/", "/sys/", "/dev/", "/run/")


def _dir_problem(value: str) -> str | None:
    """Why ``value`` cannot be a worker's directory (None: it can): an absolute, plain
    path of its own, not a system directory."""
    if not SAFE_PATH_RE.fullmatch(value):
        return "must be an absolute path of letters, digits and _ . / + -"
    parts = value.rstrip("/").split("/")
    if ".." in parts or "." in parts or posixpath.normpath(value) != (value.rstrip("/") or "/"):
        return "must be a plain path (no . or .. parts, no //)"
    plain = value.rstrip("/") or "/"
    if plain in SYSTEM_DIRS or (plain + "/").startswith(KERNEL_DIRS):
        return "is a system directory: give a directory of the worker's own, e.g. /srv/edgetb"
    return None


def _worker_problems(name: str, v: dict[str, Any]) -> list[str]:
    """What is wrong with a worker's name and paths (they become paths here and there)."""
    if not WORKER_NAME_RE.fullmatch(name) or ".." in name:
        return [
            f"worker name {name[:64]!r} must be letters, digits and _ . - (no ..), "
            f"at most 63, starting with a letter or digit"
        ]
    wdir = str(v.get("edgetb_worker_dir", ""))
    if not wdir.startswith("/") or any(c.isspace() for c in wdir):
        return [f"{name}: edgetb_worker_dir must be an absolute path without spaces"]
    return [
        f"{name}: {var} {str(v[var])!r} {why}"
        for var in ("edgetb_worker_dir", "edgetb_home", "edgetb_python")
        if v.get(var) is not None and (why := _dir_problem(str(v[var])))
    ]


def load_workers(path: str | Path) -> list[WorkerSpec]:
    """The workers of an inventory; ConfigError with one line naming every problem."""
    inv = read_inventory(path)
    validate_inventory(inv, list(inv), path)
    problems = []
    specs = []
    for name, v in inv.items():
        where = f"{name}: "
        wdir = str(v.get("edgetb_worker_dir", ""))
        bad = _worker_problems(name, v)
        if bad:
            problems += bad
            continue
        pool = v.get("edgetb_subnet_pool")
        if pool is not None:
            try:
                ipaddress.IPv4Network(str(pool))
            except ValueError:
                problems.append(where + f"edgetb_subnet_pool {pool!r} is not an IPv4 network")
        parallel = str(v.get("edgetb_parallel", "auto"))
        if parallel != "auto" and not (parallel.isdigit() and 1 <= int(parallel) <= 16):
            problems.append(where + f"edgetb_parallel {parallel!r} is not auto or 1..16")
        specs.append(
            WorkerSpec(
                name=name,
                host=RemoteHost(
                    name,
                    str(v["ansible_host"]),
                    str(v.get("ansible_user", "root")),
                    int(str(v.get("ansible_port", 22)).strip()),
                ),
                key=Path(str(v["ansible_ssh_private_key_file"])).expanduser(),
                known_hosts=Path(str(v["edgetb_known_hosts"])).expanduser()
                if v.get("edgetb_known_hosts")
                else None,
                dir=wdir.rstrip("/"),
                home=str(v.get("edgetb_home", f"{wdir.rstrip('/')}/home")),
                python=str(v["edgetb_python"]) if v.get("edgetb_python") else None,
                subnet_pool=str(pool) if pool is not None else None,
                parallel=parallel,
                interpreter=str(v.get("ansible_python_interpreter", "/usr/bin/python3")),
            )
        )
    seen: Counter[tuple] = Counter((s.host.address, s.host.port, s.dir) for s in specs)
    problems += [
        f"{s.name}: another worker uses {s.dir} on the same machine"
        for s in specs
        if seen[(s.host.address, s.host.port, s.dir)] > 1
    ]
    if len({s.key for s in specs}) > 1:
        problems.append("the workers must share one ansible_ssh_private_key_file")
    if len({s.known_hosts for s in specs} - {None}) > 1:
        problems.append("the workers name several edgetb_known_hosts files; use one")
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return specs


class Fleet:
    """The workers' SSH settings and Ansible runs (one directory under the results)."""

    def __init__(self, specs: list[WorkerSpec], out: Path, run_id: str):
        self.specs = {s.name: s for s in specs}
        self.dir = out / "workers"
        # The SSH directory (trusted keys, Ansible's connection masters) is short-lived and
        # short-named: a socket path must stay under 108 bytes. Its tag is no testbed run
        # id, so `testbed clean` leaves these masters alone.
        key = hashlib.sha256(f"{out.resolve()}:{run_id}".encode()).hexdigest()[:10]
        self.ssh = SSH(f"wk-{key}", home() / "workers" / key, specs[0].key, strict=True)

    def close(self) -> None:
        """End Ansible's connection masters and remove the SSH directory."""
        for s in self.specs.values():
            subprocess.run(
                ["ssh", "-O", "exit", "-o", f"ControlPath={self.ssh.control_path}",
                 "-p", str(s.host.port), f"{s.host.user}@{s.host.address}"],
                capture_output=True, timeout=10, check=False,
            )  # fmt: skip
        shutil.rmtree(self.ssh.dir, ignore_errors=True)

    def inventory(self, names: list[str] | None = None) -> dict:
        hosts = {}
        for s in self.specs.values():
            if names is not None and s.name not in names:
                continue
            hosts[s.name] = {
                "ansible_host": s.host.address,
                "ansible_port": s.host.port,
                "ansible_user": s.host.user,
                "ansible_ssh_private_key_file": str(s.key),
                "ansible_python_interpreter": s.interpreter,
                "ansible_remote_tmp": f"{s.dir}/tmp",
                "edgetb_worker_dir": s.dir,
                "edgetb_home": s.home,
                "edgetb_python": s.py,
                "edgetb_make_venv": s.python is None,
            }
        return {"all": {"hosts": hosts}}

    def trust_host_keys(self) -> None:
        """The workers' host keys from the inventory's known_hosts, else the user's or
        the first-contact store (the hosts backend's rules, ``hostkeys``)."""
        explicit = {s.known_hosts for s in self.specs.values()} - {None}  # one (load_workers)
        self.ssh.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        hostkeys.trust(
            [s.host for s in self.specs.values()],
            run_file=self.ssh.known_hosts,
            store=home() / STORE_NAME,
            explicit=next(iter(explicit), None),
            user_files=[USER_KNOWN_HOSTS.expanduser(), hostkeys.SYSTEM_KNOWN_HOSTS],
            timeout_s=15,
        )

    def provision(self, say, *, ycsb: bool = False, shaper: str = "auto") -> dict[str, dict]:
        """Provision and probe every worker (``ycsb``: with YCSB and the project's binding
        built there; what ``shaper`` needs on its kernel); the probes of those that are
        ready. A worker that failed is dropped
        and named; none ready is a WorkerLost."""
        archive = provision.project_archive(
            self.dir / "project.tar.gz", extra=("pyproject.toml", "scripts")
        )
        say(f"provisioning {len(self.specs)} workers: {', '.join(self.specs)}")
        secs, failures, output = provision.run_playbook(
            "worker",
            private_dir=self.dir / "ansible",
            inv=self.inventory(),
            ssh=self.ssh,
            extravars={
                "edgetb_archive": str(archive),
                "edgetb_ycsb": ycsb,
                "edgetb_shaper": shaper,
            },
        )
        failed = {line.split(":", 1)[0] for line in failures}
        if "*" in failed:
            raise WorkerLost("provisioning the workers failed:\n" + output[-2000:])
        for line in failures:
            say(f"worker left out: {line}")
        probes = {}
        for name in self.specs:
            if name in failed:
                continue
            ok, text = self.command(
                name, [self.specs[name].py, "-m", "experiments.remote.worker", "probe"]
            )
            try:
                probe = json.loads(text) if ok else None
            except ValueError:
                probe = None
            if probe is None or not probe.get("root"):
                say(f"worker left out: {name}: probe failed ({text if not ok else 'not root'})")
                continue
            probes[name] = probe
        if not probes:
            raise WorkerLost("no worker is ready (see above)")
        say(f"workers ready in {secs:.0f} s: {', '.join(probes)}")
        return probes

    def command(self, name: str, argv: list[str]) -> tuple[bool, str]:
        s = self.specs[name]
        return provision.command(
            ["env", *s.env(), *argv],
            host=name,
            private_dir=self.dir / f"ansible-{name}",  # cleaners run at once: one dir each
            inv=self.inventory([name]),
            ssh=self.ssh,
        )

    def session_argv(self, name: str) -> list[str]:
        s = self.specs[name]
        remote = [
            "env",
            *s.env(),
            s.py,
            "-m",
            "experiments.remote.worker",
            "serve",
            "--root",
            s.dir,
            "--name",
            name,
            "--parallel",
            s.parallel,
        ]
        options = ["-i", str(s.key)]
        # a connection of its own (no shared master): its end is this worker's end; a
        # link that is gone shows in 3 x 5 s
        for setting in [*self.ssh.settings(), "ControlMaster=no", "ServerAliveCountMax=3"]:
            options += ["-o", setting]
        return [
            "ssh",
            *options,
            "-p",
            str(s.host.port),
            f"{s.host.user}@{s.host.address}",
            "--",
            shlex.join(remote),
        ]

    def start(self, name: str, setup: dict[str, Any], log: Path) -> subprocess.Popen:
        """The worker's ``serve`` over its own SSH session, ``setup`` its first line of
        input (secrets stay off disk); its output goes to ``log``. Closing its input, or
        the session's end, stops it."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with append_to(log, binary=True) as out:
            proc = subprocess.Popen(
                self.session_argv(name),
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C on the terminal is the controller's to handle
            )
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(setup) + "\n").encode())
        proc.stdin.flush()
        return proc
