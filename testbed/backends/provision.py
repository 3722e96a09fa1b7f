"""Ansible for the remote backends, through ansible-runner: the run's hosts as an
inventory, playbook runs read per host (a host that was unreachable, failed a task or was
never reached is an error naming it), and what the provision playbook copies.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import TestbedError

from ..images import GUEST_JAVA, GUEST_PYTHON, GUEST_SRC

if TYPE_CHECKING:
    from .ssh import SSH, RemoteHost

PLAYBOOKS = Path(__file__).resolve().parent.parent / "playbooks"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("common", "testbed", "emulation", "model", "workloads", "experiments")


class ProvisionError(TestbedError):
    """A playbook did not complete on every host."""


def inventory(
    hosts: Sequence[RemoteHost],
    roles: Mapping[str, str],
    ssh: SSH,
    python: str = "/usr/bin/python3",
) -> dict:
    """An Ansible inventory (as data) of the run's hosts, grouped by role."""
    groups: dict[str, dict] = {"edge": {"hosts": {}}, "endpoint": {"hosts": {}}}
    for h in hosts:
        groups[roles[h.name]]["hosts"][h.name] = {
            "ansible_host": h.address,
            "ansible_port": h.port,
            "ansible_user": h.user,
            "ansible_ssh_private_key_file": str(ssh.key),
            "ansible_python_interpreter": python,
            # the keys this run trusts: a hosts-backend run on these machines checks them
            "edgetb_known_hosts": str(ssh.known_hosts),
        }
    return {"all": {"children": groups}}


def playbook(
    name: str,
    *,
    private_dir: Path,
    inv: dict,
    ssh: SSH,
    extravars: dict,
    timeout_s: float = 900,
) -> float:
    """Run ``playbooks/<name>.yml`` through ansible-runner on every host of ``inv``;
    ProvisionError naming each host it did not complete on (unreachable, a failed task,
    or never reached)."""
    secs, failures, output = run_playbook(
        name, private_dir=private_dir, inv=inv, ssh=ssh, extravars=extravars, timeout_s=timeout_s
    )
    if failures:
        detail = "\n".join(failures)
        if all(line.startswith("*") for line in failures):
            detail += "\n" + output[-2000:]
        raise ProvisionError(f"playbook {name} did not complete on every host:\n{detail}")
    return secs


def run_playbook(
    name: str,
    *,
    private_dir: Path,
    inv: dict,
    ssh: SSH,
    extravars: dict,
    timeout_s: float = 900,
) -> tuple[float, list[str], str]:
    """``playbook`` without the error: its time, a line per host it did not complete on
    ("*" first: the run itself failed), and its output."""
    import ansible_runner

    t0 = time.monotonic()
    r = ansible_runner.run(
        **_runner_args(private_dir, inv, ssh),
        playbook=str(PLAYBOOKS / f"{name}.yml"),
        extravars=extravars,
        timeout=int(timeout_s),
    )
    failures = playbook_failures(r, inventory_hosts(inv))
    return time.monotonic() - t0, failures, r.stdout.read() if failures else ""


def _runner_args(private_dir: Path, inv: dict, ssh: SSH) -> dict:
    """ansible-runner's arguments shared by playbooks and single commands."""
    private_dir.mkdir(parents=True, exist_ok=True)
    (private_dir / "inventory.json").write_text(json.dumps(inv, indent=1))
    # Ansible adds the ControlPath itself (from ANSIBLE_SSH_CONTROL_PATH): the same tagged
    # sockets as our own ssh commands, so both share one connection per host.
    ssh_args = " ".join(f"-o {shlex.quote(s)}" for s in ssh.settings())
    venv_bin = str(Path(sys.executable).parent)
    envvars = {
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_SSH_ARGS": f"-o ControlMaster=auto -o ControlPersist=30 {ssh_args}",
        "ANSIBLE_SSH_CONTROL_PATH": ssh.control_path.replace("%h", "%%h"),
        # True: Ansible adds no StrictHostKeyChecking=no; our ssh settings decide.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_LOCAL_TEMP": str(private_dir / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    return {
        "private_data_dir": str(private_dir),
        "inventory": str(private_dir / "inventory.json"),
        "envvars": envvars,
        "quiet": True,
        "suppress_env_files": True,
        # no cancel through signals: ansible-runner would install SIGINT/SIGTERM handlers
        # of its own and never restore ours; Ctrl-C stays a KeyboardInterrupt here
        "cancel_callback": lambda: False,
    }


def command(
    argv: Sequence[str],
    *,
    host: str,
    private_dir: Path,
    inv: dict,
    ssh: SSH,
    timeout_s: float = 300,
) -> tuple[bool, str]:
    """One command on one host of ``inv`` (Ansible's command module): whether it
    succeeded, and its output (or why not)."""
    import ansible_runner

    r = ansible_runner.run(
        **_runner_args(private_dir, inv, ssh),
        host_pattern=host,
        module="command",
        module_args=shlex.join(argv),
        timeout=int(timeout_s),
    )
    out = ""
    for event in r.events:
        res = event.get("event_data", {}).get("res")
        if event.get("event") == "runner_on_ok" and isinstance(res, dict):
            return True, str(res.get("stdout", ""))
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable") and res:
            out = one_line(res.get("stderr") or res.get("msg") or res)
    return False, out or f"ended {r.status} (rc {r.rc})"


def inventory_hosts(inv: dict) -> list[str]:
    """Every host name in an inventory as data (groups nested under ``children``)."""
    names: list[str] = []

    def walk(group: dict) -> None:
        for host in group.get("hosts") or {}:
            if host not in names:
                names.append(host)
        for child in (group.get("children") or {}).values():
            walk(child or {})

    for group in inv.values():
        walk(group or {})
    return names


def one_line(text: object, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


def playbook_failures(result, hosts: Sequence[str]) -> list[str]:
    """One line per host a playbook did not complete on, from an ansible-runner result
    (``status``, ``rc``, ``events``, ``stats``); [] when it completed on every host.

    A host is a failure when it was unreachable, when a task failed on it (unless the
    task said ``ignore_errors``), or when no play ran on it at all. A failed run with
    no host to blame gives one line starting with ``*``.
    """
    lines: dict[str, str] = {}
    for event in result.events:
        kind = event.get("event")
        if kind not in ("runner_on_failed", "runner_on_unreachable"):
            continue
        data = event.get("event_data") or {}
        if kind == "runner_on_failed" and data.get("ignore_errors"):
            continue
        host = str(data.get("host"))
        res = data.get("res") or {}
        msg = res.get("msg") or res.get("stderr") or res.get("stdout") or ""
        if msg == "non-zero return code" and (res.get("stderr") or res.get("stdout")):
            # a command's own words say more than Ansible's: its last line of output
            tail = str(res.get("stderr") or res.get("stdout")).strip().splitlines()[-1:]
            msg = f"{msg} {res.get('rc')}: {tail[0] if tail else ''}"
        what = "unreachable" if kind == "runner_on_unreachable" else f"task '{data.get('task')}'"
        lines.setdefault(host, f"{host}: {what}: {one_line(msg)}")
    stats = result.stats or {}
    for host in hosts:
        if host in lines:
            continue
        if host in (stats.get("dark") or {}):
            lines[host] = f"{host}: unreachable"
        elif host in (stats.get("failures") or {}):
            lines[host] = f"{host}: a task failed"
        elif host not in (stats.get("processed") or {}):
            lines[host] = f"{host}: not reached by the playbook ({result.status})"
    if not lines and (result.rc != 0 or result.status != "successful"):
        lines["*"] = f"* the playbook ended {result.status} (rc {result.rc})"
    return list(lines.values())


def project_archive(path: Path, extra: Sequence[str] = ()) -> Path:
    """The testbed's Python packages (code and shipped data) as a tarball for the hosts;
    ``extra``: more of the project's files or directories (a worker's set-up)."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = info.name
        if "__pycache__" in name or name.endswith((".pyc", ".pyo")):
            return None
        return info

    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for pkg in (*PROJECT_PACKAGES, *extra):
            tar.add(PROJECT_ROOT / pkg, arcname=pkg, filter=keep)
    return path


def cassandra_archive(
    private_dir: Path, hosts: Sequence[str], exec_argv: Callable[..., list[str]]
) -> str:
    """The testbed's Cassandra as a tarball in ``private_dir`` for the hosts that lack it
    (its last-made part, as the provision playbook checks, asked over each host's
    ``exec_argv``), or "" when every host has it: 64 MB of jars packed for nothing took
    seconds of the controller's CPU."""
    from common.runner import run

    from ..cassandra import dist as dist_mod
    from ..cassandra import quiet

    dist = dist_mod.load()
    marker = str(dist.root / quiet.DIR / quiet.JAR)
    if not any(  # the first host without it is enough to need the archive
        run(exec_argv(h, ["test", "-e", marker]), check=False, timeout=60).returncode for h in hosts
    ):
        return ""
    _ = dist.tools_logback  # written on first use; the hosts' nodetool needs it
    path = private_dir / "cassandra.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for sub in ("lib", "conf", quiet.DIR):
            if (dist.root / sub).is_dir():
                tar.add(dist.root / sub, arcname=sub)
    return str(path)


def provision_vars(run_id: str, archive: Path) -> dict:
    return {
        "edgetb_run": run_id,
        "edgetb_src": GUEST_SRC,
        "edgetb_archive": str(archive),
        "edgetb_python": GUEST_PYTHON,
        "edgetb_java": GUEST_JAVA,
    }
