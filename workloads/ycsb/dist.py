"""YCSB for the testbed: the YCSB engine and the Apache Cassandra Java driver from Maven
Central (the same resolver as Cassandra, ``testbed.maven``), plus the project's own CQL
binding (``java/edgetb/ycsb``) compiled with ``javac`` against them. Cached under
``$EDGETB_CACHE`` (default ~/.cache/edgetb) in a directory named by a digest of every
input (versions, sources), with a sha256 manifest; rebuilt only when an input changes.

YCSB's own Cassandra binding is not published on Maven Central, hence the binding here.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from common.errors import CommandError, StateError
from common.keyed_cache import build_once
from common.paths import cache_root
from common.runner import run
from testbed import maven
from testbed.cassandra.java import find_javac

YCSB_VERSION = "0.17.0"
DRIVER_VERSION = "4.19.0"
SLF4J_VERSION = "1.7.26"  # the version YCSB's and the driver's slf4j-api resolve to
ARTIFACTS: tuple[maven.Artifact, ...] = (
    ("site.ycsb", "core", YCSB_VERSION),
    ("org.apache.cassandra", "java-driver-core", DRIVER_VERSION),
    ("org.slf4j", "slf4j-simple", SLF4J_VERSION),  # the driver's warnings on stderr
    # HdrHistogram 2.1.4 (YCSB's) writes its logs' base64 with javax.xml.bind, which left
    # the JDK in Java 11: without it the hdrhistogram export fails at the end of a run
    ("javax.xml.bind", "jaxb-api", "2.3.1"),
)
SOURCES = Path(__file__).resolve().parent / "java"
WORKLOADS = Path(__file__).resolve().parent / "workloads"
BINDING_JAR = "edgetb-ycsb-binding.jar"
BINDING_CLASS = "edgetb.ycsb.CqlClient"
JAVA_RELEASE = "17"
MANIFEST = "manifest.json"


def sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def digest() -> str:
    """What the installation depends on: the artifacts and the binding's sources."""
    h = hashlib.sha256(json.dumps([ARTIFACTS, JAVA_RELEASE]).encode())
    for path in sources():
        h.update(str(path.relative_to(SOURCES)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class YcsbDist:
    root: Path
    jars: dict[str, str]  # lib/NAME -> sha256, the binding's jar included

    @property
    def classpath(self) -> str:
        return ":".join(str(self.root / name) for name in sorted(self.jars))

    def verify(self, *, full: bool = False) -> None:
        for name, want in self.jars.items():
            path = self.root / name
            if not path.is_file():
                raise StateError(f"YCSB jar missing: {path} (run `edgetb ycsb install`)")
            if full and _sha256(path) != want:
                raise StateError(f"checksum mismatch for {path} (reinstall with --force)")


def dist_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / f"ycsb-{YCSB_VERSION}-{digest()}"


def load(root: Path | None = None) -> YcsbDist:
    """The installed YCSB of these sources; StateError when it is not installed."""
    directory = dist_dir(root)
    manifest = directory / MANIFEST
    if not manifest.is_file():
        raise StateError(
            f"YCSB {YCSB_VERSION} with this binding is not installed in {directory}: "
            "run `edgetb ycsb install` (`make ycsb` does, with javac)"
        )
    dist = YcsbDist(directory, json.loads(manifest.read_text())["jars"])
    dist.verify()
    return dist


def install(*, root: Path | None = None, force: bool = False, progress=print) -> YcsbDist:
    """Fetch YCSB and the driver, build the binding (idempotent; one installer at a time)."""
    return build_once(
        dist_dir(root),
        lambda: load(root),
        lambda staging, javac: _build(staging, javac, progress),
        prepare=lambda: find_javac("the YCSB binding"),  # before anything is fetched
        force=force,
    )


def _build(staging: Path, javac: str, progress) -> None:
    """YCSB's jars, the driver's and the binding built from ``sources()`` into ``staging``
    (its parent: a workspace of its own)."""
    lib = staging / "lib"
    lib.mkdir(parents=True)
    progress(f"fetching YCSB {YCSB_VERSION} and the Java driver {DRIVER_VERSION} (~17 MB, once)")
    maven.copy_dependencies(ARTIFACTS, staging.parent, lib, "YCSB")
    progress("building the CQL binding (javac)")
    classes = staging.parent / "classes"
    try:
        run(
            [javac, "--release", JAVA_RELEASE, "-nowarn", "-cp", f"{lib}/*",
             "-d", str(classes), *map(str, sources())],
            timeout=600,
        )  # fmt: skip
        jar = shutil.which("jar") or str(Path(javac).with_name("jar"))
        run([jar, "cf", str(lib / BINDING_JAR), "-C", str(classes), "."], timeout=120)
    except CommandError as exc:
        raise StateError(f"the YCSB binding does not build: {exc}") from exc
    jars = {f"lib/{p.name}": _sha256(p) for p in sorted(lib.glob("*.jar"))}
    (staging / MANIFEST).write_text(
        json.dumps(
            {"ycsb": YCSB_VERSION, "driver": DRIVER_VERSION, "digest": digest(),
             "artifacts": ARTIFACTS, "jars": jars},
            indent=1,
        )
    )  # fmt: skip
    progress(f"YCSB {YCSB_VERSION}: {len(jars)} jars")


# On the endpoint: unpack the stream into $1, check every jar's sha256 there, then put it
# in place as $2 (a copy that failed midway is removed, never used).
UNPACK = (
    'rm -rf "$1" && mkdir -p "$1" && tar -x -C "$1" && cd "$1" && sha256sum -c --quiet '
    'SHA256SUMS && rm SHA256SUMS && cd / && rm -rf "$2" && mv -T "$1" "$2" || '
    '{ s=$?; rm -rf "$1"; exit $s; }'
)


def ship(tb, dist: YcsbDist) -> float:
    """Copy ``dist`` to ``tb``'s remote endpoint at the same absolute path, unless the
    endpoint has it already (the same manifest: the same jars, by sha256), as one tar
    stream over the backend's own channel, checked with ``sha256sum -c`` there. Returns
    seconds. The directory stays on the machine, like the Cassandra distribution: a cache
    keyed on its inputs, not the run's state.

    (Ansible's copy module checks each of the ~40 jars in a module run of its own: 3.5
    minutes on a TCG guest even when nothing differs; this costs one command then.)"""
    import io
    import subprocess
    import tarfile
    import time

    t0 = time.monotonic()
    ep = tb.topology.endpoint.name
    manifest = (dist.root / MANIFEST).read_text()
    have = subprocess.run(
        tb.exec_argv(ep, ["cat", str(dist.root / MANIFEST)]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if have.returncode == 0 and have.stdout == manifest:
        return time.monotonic() - t0
    sums = "".join(f"{sha}  {name}\n" for name, sha in sorted(dist.jars.items()))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(dist.jars):
            tar.add(dist.root / name, arcname=name)
        for name, text in ((MANIFEST, manifest), ("SHA256SUMS", sums)):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    incoming = f"{dist.root}.incoming-{tb.run_id}"
    proc = subprocess.run(
        tb.exec_argv(ep, ["sh", "-c", UNPACK, "sh", incoming, str(dist.root)]),
        input=buf.getvalue(),
        capture_output=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise StateError(
            f"could not copy YCSB to {ep}:{dist.root}: "
            + proc.stderr.decode(errors="replace").strip()[-300:]
        )
    return time.monotonic() - t0


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
