"""Quiet nodes: stock Cassandra with one class rebuilt so that its shared executor pool
stops spinning soon after its work ends — a named, deliberate deviation from stock.

Why: every hop of a write runs on Cassandra's shared executor pool (SEP). A worker that
runs out of work does not block: ``SEPWorker.doWaitSpin()`` parks ~10 µs at a time (~60 µs
with the JVM's timer slack) until it has spun alone for ``stopCheckInterval``, 10 ms, a
compile-time constant in 5.0.6 (no property sets it). On one machine that tail, 500–950
wake-ups per write, is most of the CPU a write costs, and testbeds side by side slow each
other down with it (issue 39; ``benchmarks/write_cpu.py`` measures it per thread).

What changes: the one line that defines ``stopCheckInterval`` reads a system property
(:data:`PROPERTY`) with the stock value as its default; quiet nodes start with
:data:`STOP_CHECK_NS`. The class is compiled from the 5.0.6 sources jar of Maven
Central, whose sha256 and the source file's are checked, and the patched line must
match exactly once. The jar holding the rebuilt class is put first on quiet nodes'
classpath; stock nodes run the unmodified jars. A run's manifest records the build
(``CassandraSettings.build``), and ``stock`` stays available everywhere.

Nothing else differs: quiet nodes once also refreshed the approximate clock every 100 ms
and the dynamic snitch's scores every second, taken for idle housekeeping that no
measurement sees. The snitch times each reply with that clock, though: at 100 ms a 40 ms
round trip reads as 0 more often than not, every replica scores 0, and reads at ONE went
to the ring's first replica instead of the coordinator's own (test_3c's YCSB cell at
20 ms links read 84.9 ms at ONE where stock reads 43). Both are the testbed's again.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Literal

from common.errors import CommandError, StateError
from common.keyed_cache import build_once
from common.runner import run

from .. import maven
from .dist import CassandraDist
from .java import find_javac

CassandraBuild = Literal["stock", "quiet"]
BUILDS: tuple[str, ...] = ("stock", "quiet")

VERSION = "5.0.6"  # the only version whose sources are checked below
SOURCES_SHA256 = "d5c5aa6d7c8792ff9c7ece9e842f028bce70d728f6071f110b79004882d77cb9"
SOURCE = "org/apache/cassandra/concurrent/SEPWorker.java"
SOURCE_SHA256 = "47b8039e424eee49eadb8dbec6c5ba232645006936b3ed28beddb8a1d6cd819c"
PROPERTY = "edgetb.sep_stop_check_ns"
STOCK_LINE = "    private static final long stopCheckInterval = TimeUnit.MILLISECONDS.toNanos(10L);"
PATCHED_LINE = (
    "    private static final long stopCheckInterval = "
    f'Long.getLong("{PROPERTY}", TimeUnit.MILLISECONDS.toNanos(10L));'
)
# A worker alone spins for 0.1 ms instead of 10 ms before it blocks; waking a blocked
# worker costs one unpark (tens of µs), far below what a write at edge latencies measures.
STOP_CHECK_NS = 100_000
JAVA_RELEASE = "11"  # the stock classes' own (class file major version 55)

DIR = "quiet"
JAR = "edgetb-quiet-sep.jar"
MANIFEST = "quiet.json"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed jar entry times: the same sources make the same jar


def jar_path(dist: CassandraDist) -> Path:
    return dist.root / DIR / JAR


def classpath(dist: CassandraDist, build: str) -> str:
    """The nodes' classpath for ``build``: the stock jars, with the rebuilt class first
    for quiet nodes."""
    if build == "quiet":
        return f"{jar_path(dist)}:{dist.classpath}"
    return dist.classpath


def jvm_properties(build: str) -> list[str]:
    return [f"-D{PROPERTY}={STOP_CHECK_NS}"] if build == "quiet" else []


def patch(source: str) -> str:
    """``source`` (SEPWorker.java) with the stop-check line patched; StateError unless the
    stock line is there exactly once."""
    lines = source.split("\n")
    found = [i for i, line in enumerate(lines) if line == STOCK_LINE]
    if len(found) != 1:
        raise StateError(
            f"{SOURCE}: the stock line defining stopCheckInterval is there "
            f"{len(found)} times, expected once; quiet nodes cannot be built"
        )
    lines[found[0]] = PATCHED_LINE
    return "\n".join(lines)


def check(dist: CassandraDist) -> Path:
    """The quiet jar of ``dist``, checked against its manifest; StateError when it is not
    built or does not match."""
    jar = jar_path(dist)
    manifest = jar.parent / MANIFEST
    if not manifest.is_file() or not jar.is_file():
        raise StateError(
            f"quiet Cassandra nodes are not built in {jar.parent}; run `edgetb dist install`"
        )
    recorded = json.loads(manifest.read_text()).get("jar_sha256")
    if recorded != _sha256(jar.read_bytes()):
        raise StateError(
            f"{jar} does not match {manifest} (rebuild: `edgetb dist install --force`)"
        )
    return jar


def install(dist: CassandraDist, *, force: bool = False, progress=print) -> Path:
    """Build the quiet jar of ``dist`` once (idempotent, one builder at a time); its path."""
    if dist.version != VERSION:
        raise StateError(
            f"quiet nodes are built from Cassandra {VERSION}'s sources; this is {dist.version}"
        )

    def build(staging: Path, javac: str) -> None:
        progress(f"building quiet Cassandra nodes (one class of {VERSION}'s sources, javac)")
        _build(dist, staging.parent, javac)

    return build_once(
        dist.root / DIR,
        lambda: check(dist),
        build,
        prepare=lambda: find_javac("quiet Cassandra nodes"),  # before anything is fetched
        force=force,
    )


def _build(dist: CassandraDist, tmp: Path, javac: str) -> None:
    sources = maven.copy_artifact(
        ("org.apache.cassandra", "cassandra-all", VERSION), "sources", tmp, tmp / "sources"
    )
    data = sources.read_bytes()
    if _sha256(data) != SOURCES_SHA256:
        raise StateError(f"{sources.name} from Maven Central does not have the expected sha256")
    with zipfile.ZipFile(sources) as zf:
        text = zf.read(SOURCE)
    if _sha256(text) != SOURCE_SHA256:
        raise StateError(f"{SOURCE} in {sources.name} does not have the expected sha256")
    src = tmp / "src" / SOURCE
    src.parent.mkdir(parents=True)
    src.write_text(patch(text.decode()))
    classes = tmp / "classes"
    try:
        run(
            [javac, "--release", JAVA_RELEASE, "-nowarn", "-cp", dist.classpath,
             "-d", str(classes), str(src)],
            timeout=600,
        )  # fmt: skip
    except CommandError as exc:
        raise StateError(f"the quiet SEPWorker does not compile: {exc}") from exc
    built = sorted(p.relative_to(classes).as_posix() for p in classes.rglob("*.class"))
    prefix = SOURCE.removesuffix(".java")
    if not built or any(not (n == f"{prefix}.class" or n.startswith(f"{prefix}$")) for n in built):
        raise StateError(f"javac built other classes than SEPWorker's: {built}")
    out = tmp / DIR
    out.mkdir()
    with zipfile.ZipFile(out / JAR, "w", zipfile.ZIP_DEFLATED) as jar:
        for name in built:
            jar.writestr(zipfile.ZipInfo(name, _EPOCH), (classes / name).read_bytes())
    (out / MANIFEST).write_text(
        json.dumps(
            {
                "cassandra": VERSION,
                "sources_sha256": SOURCES_SHA256,
                "source": SOURCE,
                "source_sha256": SOURCE_SHA256,
                "stock_line": STOCK_LINE.strip(),
                "patched_line": PATCHED_LINE.strip(),
                "property": PROPERTY,
                "stop_check_ns": STOP_CHECK_NS,
                "classes": built,
                "jar_sha256": _sha256((out / JAR).read_bytes()),
            },
            indent=1,
        )
    )


def describe(dist: CassandraDist) -> dict:
    """The quiet build's manifest (what a run records beside ``build = "quiet"``)."""
    check(dist)
    return json.loads((jar_path(dist).parent / MANIFEST).read_text())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
