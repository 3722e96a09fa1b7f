"""Workloads run on the endpoint host. ``WriteWorker`` drives ``writes.py`` from the sweep."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from common.errors import TestbedError
from common.files import append_to
from testbed.testbed import Testbed

from .protocol import ROW_FIELDS

WATCH_EVERY_S = 1.0
IDLE_MARGIN_S = 15.0


class WorkerError(TestbedError):
    """The workload process failed or stopped answering."""


class WorkloadRefused(WorkerError):
    """The workload process answered a command with an error line (and is still in step
    with the protocol)."""


class WriteWorker:
    """One ``workloads.writes`` process on the endpoint, for one cluster.

    ``watch`` is called about once a second while waiting (the sweep checks that every
    node is alive there and raises to stop the cell).
    """

    def __init__(
        self,
        tb: Testbed,
        *,
        policy: str,
        timeout_s: float,
        log_path: Path,
        watch: Callable[[], None] = lambda: None,
    ):
        self.timeout_s = timeout_s
        self.watch = watch
        self.log_path = log_path
        argv = [
            tb.python,
            "-m",
            "workloads.writes",
            "--policy",
            policy,
            "--timeout",
            str(timeout_s),
        ]
        self._log = append_to(log_path, binary=True)
        self.proc = tb.popen(
            tb.topology.endpoint.name,
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both PIPE
        self._stdin: IO[bytes] = self.proc.stdin
        self._stdout: IO[bytes] = self.proc.stdout
        self._buf = b""
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._stdout, selectors.EVENT_READ)
        try:
            self.hello: dict[str, Any] = self._line(90)["hello"]
        except BaseException:
            self.close()
            raise

    # -- protocol --------------------------------------------------------------------------

    def _send(self, cmd: dict) -> None:
        try:
            self._stdin.write((json.dumps(cmd) + "\n").encode())
            self._stdin.flush()
        except BrokenPipeError as exc:
            raise WorkerError(f"the workload process exited: {self._log_tail()}") from exc

    def _line(self, idle_s: float) -> dict:
        """The next JSON line; WorkerError when nothing arrives for ``idle_s`` seconds."""
        deadline = time.monotonic() + idle_s
        while b"\n" not in self._buf:
            now = time.monotonic()
            if now > deadline:
                raise WorkerError(f"the workload process sent nothing for {idle_s:.0f} s")
            if self._sel.select(timeout=min(WATCH_EVERY_S, deadline - now)):
                chunk = os.read(self._stdout.fileno(), 1 << 16)
                if not chunk:
                    self.proc.wait(timeout=10)
                    raise WorkerError(
                        f"the workload process exited "
                        f"(status {self.proc.returncode}): {self._log_tail()}"
                    )
                self._buf += chunk
            self.watch()
        line, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(line)
        if "error" in msg:
            raise WorkloadRefused(f"workload: {msg['error']}")
        return msg

    def _log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:]) or "(empty log)"

    # -- commands --------------------------------------------------------------------------

    def schema(self, keyspace: str, rf: int | dict[str, int]) -> dict:
        self._send({"op": "schema", "keyspace": keyspace, "rf": rf})
        return self._line(120)

    def run(
        self,
        *,
        keyspace: str,
        cl: str,
        writes: int,
        warmup: int,
        key_seed: str,
        warmup_seed: str,
        on_progress: Callable[[int], None] = lambda n: None,
        on_measuring: Callable[[], None] = lambda: None,
    ) -> list[dict[str, Any]]:
        """Warm up, then time ``writes`` writes; returns one dict per request.
        ``on_measuring``: called when the warm-up is over and the timed writes begin."""
        self._send(
            {
                "op": "run",
                "keyspace": keyspace,
                "cl": cl,
                "writes": writes,
                "warmup": warmup,
                "key_seed": key_seed,
                "warmup_seed": warmup_seed,
            }
        )
        # Every line (a batch of rows, or a heartbeat during warm-up) comes within one
        # request's timeout of the previous one: silence beyond that is a hung workload.
        idle = self.timeout_s + IDLE_MARGIN_S
        rows: list[dict[str, Any]] = []
        while True:
            msg = self._line(idle)
            if "r" in msg:
                rows.extend(dict(zip(ROW_FIELDS, r, strict=True)) for r in msg["r"])
                on_progress(len(rows))
            elif "warmup_done" in msg:
                on_measuring()
            elif "done" in msg:
                if len(rows) != writes:
                    raise WorkerError(f"workload returned {len(rows)} of {writes} requests")
                return rows

    def readback(self, keyspace: str, rows: list[dict[str, Any]], settle_s: float) -> dict:
        """The acknowledged writes among ``rows`` (``run``'s) read back by value from each
        replica and at ALL (``workloads.readback``): their verdicts counted per replica
        (by address) and at ALL, and how many are lost."""
        acked = [[r["seq"], r["key"], r["t_start_ns"]] for r in rows if r["error"] is None]
        self._send({"op": "readback", "keyspace": keyspace, "settle_s": settle_s, "writes": acked})
        # per replica a read of 100 keys, 8 at once, then the settle time, then the
        # keys short somewhere at ALL (10 a read, 3 tries): bounded by request timeouts
        reads = len(acked) // 10 + 10
        return self._line(settle_s + reads * self.timeout_s + IDLE_MARGIN_S)["readback"]

    def abort(self) -> None:
        """End the process at once (by PID): after a failure in the middle of a command,
        its output can no longer be trusted to match the protocol."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.close()

    def close(self) -> None:
        """Ask the process to quit; kill it (by PID) if it does not."""
        if self.proc.poll() is None:
            try:
                self._send({"op": "quit"})
                self._stdin.close()
                self.proc.wait(timeout=15)
            except (WorkerError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._sel.close()
        self._log.close()
