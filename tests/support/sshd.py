"""A loopback SSH server for the worker tests (``test_8_workers``): the machine reached
over SSH as if it were another, without touching the system's sshd, ``~/.ssh`` or any
user account. It speaks the real SSH protocol (asyncssh) to the real OpenSSH client that
``experiments.remote.fleet`` uses (Ansible, the workers' sessions); each session's command
runs as a real process of this server (``/bin/sh -c``), with its stdin closed when the session ends,
as sshd does. SFTP is served for Ansible's file transfers.

    python -m tests.support.sshd --host-key K --authorized-keys A --port-file F

Listens on 127.0.0.1 at a free port (written to ``--port-file`` once it accepts);
accepts only the keys in ``--authorized-keys`` from 127.0.0.1. SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

import asyncssh


class Server(asyncssh.SSHServer):
    def __init__(self, authorized: asyncssh.SSHAuthorizedKeys):
        self.authorized = authorized

    def begin_auth(self, username: str) -> bool:
        return True  # a key is always required

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return (
            username == "root"
            and self.authorized.validate(key, "127.0.0.1", "127.0.0.1") is not None
        )


async def run_command(process: asyncssh.SSHServerProcess) -> None:
    """The session's command, its stdin, stdout and stderr forwarded until it exits; the
    end of the session (the client gone) closes its stdin."""
    command = process.command or "exec /bin/sh -l"
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=os.environ.get("HOME", "/"),
        start_new_session=True,  # like sshd: the session's processes are a group of their own
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin = proc.stdin

    async def feed() -> None:
        try:
            while data := await process.stdin.read(65536):
                stdin.write(data)
                await stdin.drain()
        except (OSError, asyncssh.Error):
            pass
        finally:
            stdin.close()

    async def pump(source: asyncio.StreamReader, target) -> None:
        while data := await source.read(65536):
            try:
                target.write(data)
            except (OSError, asyncssh.Error):
                return  # the client is gone: the rest is dropped, as sshd does

    feeding = asyncio.create_task(feed())
    await asyncio.gather(pump(proc.stdout, process.stdout), pump(proc.stderr, process.stderr))
    code = await proc.wait()
    feeding.cancel()
    try:
        process.exit(code if code >= 0 else 128 - code)
    except (OSError, asyncssh.Error):
        pass


async def serve(args: argparse.Namespace) -> None:
    authorized = asyncssh.read_authorized_keys(args.authorized_keys)
    server = await asyncssh.create_server(
        lambda: Server(authorized),
        "127.0.0.1",
        0,
        server_host_keys=[args.host_key],
        process_factory=run_command,
        sftp_factory=True,
        allow_scp=True,
        encoding=None,
        keepalive_interval=5,
    )
    port = server.sockets[0].getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, args.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host-key", required=True)
    p.add_argument("--authorized-keys", required=True)
    p.add_argument("--port-file", required=True)
    asyncio.run(serve(p.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
