"""The Apache Cassandra distribution: jars assembled from Maven Central (or an Apache
binary tarball), kept in a cache directory with a checksum manifest and reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import lzma
import shutil
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from common.errors import ConfigError, StateError
from common.keyed_cache import build_once
from common.paths import cache_root

from .. import maven

log = logging.getLogger(__name__)

CASSANDRA_VERSION = "5.0.6"
MANIFEST = "manifest.json"
# nodetool and other tools: warnings only, on stderr, so stdout stays parseable.
LOGBACK_TOOLS_XML = """<configuration scan="false">
  <appender name="STDERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%-5level %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="STDERR" /></root>
</configuration>
"""


@dataclass(frozen=True)
class CassandraDist:
    """An installed Cassandra: its version, jar directory and the checksums recorded."""

    version: str
    root: Path
    source: str
    jars: dict[str, str]  # file name -> sha256

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"

    @property
    def classpath(self) -> str:
        # Sorted and absolute: the class-data-sharing archive is only valid for this exact path.
        return ":".join(str(self.lib_dir / name) for name in sorted(self.jars))

    @property
    def tools_logback(self) -> Path:
        """Logging config for nodetool (written on first use; warnings to stderr only)."""
        path = self.root / "conf" / "logback-tools.xml"
        if not path.is_file():
            path.parent.mkdir(exist_ok=True)
            path.write_text(LOGBACK_TOOLS_XML)
        return path

    def cds_archive(self, java_version: str, build: str = "stock") -> Path:
        """Path of the class-data-sharing archive for this dist, Java version and build
        (``testbed.cassandra.quiet``: an archive holds only its own classpath's classes)."""
        suffix = "" if build == "stock" else f"-{build}"
        return self.root / "cds" / f"cassandra-java{java_version}{suffix}.jsa"

    def verify(self, *, full: bool = False) -> None:
        """Check every jar is present with its recorded size (``full``: its sha256 too).

        Raises StateError naming the first jar that does not match.
        """
        for name, digest in self.jars.items():
            path = self.lib_dir / name
            if not path.is_file():
                raise StateError(f"Cassandra jar missing: {path} (reinstall with --force)")
            if full and _sha256(path) != digest:
                raise StateError(f"checksum mismatch for {path} (reinstall with --force)")


def dist_dir(version: str = CASSANDRA_VERSION, root: Path | None = None) -> Path:
    return (root or cache_root()) / f"cassandra-{version}"


def load(version: str = CASSANDRA_VERSION, root: Path | None = None) -> CassandraDist:
    """The installed distribution of ``version``; raises StateError if not installed."""
    directory = dist_dir(version, root)
    manifest = directory / MANIFEST
    if not manifest.is_file():
        raise StateError(
            f"Cassandra {version} is not installed in {directory}; run `edgetb dist install`"
        )
    data = json.loads(manifest.read_text())
    dist = CassandraDist(data["version"], directory, data["source"], data["jars"])
    dist.verify()
    return dist


def install(
    version: str = CASSANDRA_VERSION,
    *,
    tarball: Path | None = None,
    root: Path | None = None,
    force: bool = False,
    progress=print,
) -> CassandraDist:
    """Install Cassandra ``version`` into the cache (idempotent) and return it.

    From Maven Central (``org.apache.cassandra:cassandra-all`` and its runtime dependencies,
    resolved by Maven with strict checksums) unless ``tarball`` names a local Apache binary
    tarball. An existing, intact installation is reused unless ``force``.
    """
    directory = dist_dir(version, root)
    if tarball is not None:
        check_tarball(Path(tarball), version)
    return build_once(
        directory,
        lambda: load(version, root),
        lambda staging, _: _build(version, staging, tarball, progress),
        force=force,
    )


def _build(version: str, staging: Path, tarball: Path | None, progress) -> None:
    """The jars and their manifest into ``staging`` (its parent: a workspace of its own)."""
    lib = staging / "lib"
    lib.mkdir(parents=True)
    if tarball is not None:
        progress(f"extracting Cassandra jars from {tarball}")
        source = f"tarball:{Path(tarball).resolve()}"
        _extract_tarball(Path(tarball), lib)
    else:
        progress(f"assembling Cassandra {version} from Maven Central (~66 MB, once)")
        source = f"maven:org.apache.cassandra:cassandra-all:{version}"
        _maven_copy(version, staging.parent, lib)
    jars = {p.name: _sha256(p) for p in sorted(lib.glob("*.jar"))}
    if not any(n.startswith(("cassandra-all-", "apache-cassandra-")) for n in jars):
        raise StateError(f"no Cassandra jar found in {source}")
    (staging / MANIFEST).write_text(
        json.dumps({"version": version, "source": source, "jars": jars}, indent=1)
    )
    progress(f"Cassandra {version}: {len(jars)} jars")


def maven_pom(version: str) -> str:
    """A throw-away POM whose only dependency is cassandra-all ``version``."""
    return maven.pom([("org.apache.cassandra", "cassandra-all", version)], "cassandra-dist")


def _maven_copy(version: str, workdir: Path, lib: Path) -> None:
    maven.copy_dependencies(
        [("org.apache.cassandra", "cassandra-all", version)], workdir, lib, "Cassandra"
    )


def _lib_jar(member: tarfile.TarInfo) -> str | None:
    """The jar's file name if ``member`` is TOP/lib/NAME.jar of a binary tarball."""
    parts = Path(member.name).parts
    if member.isfile() and len(parts) == 3 and parts[1] == "lib" and parts[2].endswith(".jar"):
        return parts[2]
    return None


def check_tarball(tarball: Path, version: str = CASSANDRA_VERSION) -> None:
    """ConfigError naming ``tarball`` unless it is Apache Cassandra ``version``'s binary
    tarball (a tar archive with TOP/lib/apache-cassandra-VERSION.jar). Reads only."""
    if not tarball.exists():
        raise ConfigError(f"tarball not found: {tarball}")
    if not tarball.is_file():
        raise ConfigError(f"tarball {tarball} is not a file")
    wanted = f"apache-cassandra-{version}.jar"
    try:
        with tarfile.open(tarball) as tar:
            jars = [name for m in tar if (name := _lib_jar(m))]
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError):
        raise ConfigError(
            f"{tarball} is not a readable tar archive; expected the binary tarball "
            f"apache-cassandra-{version}-bin.tar.gz"
        ) from None
    if wanted in jars:
        return
    others = sorted(j for j in jars if j.startswith("apache-cassandra-") and j[17:18].isdigit())
    if others:
        raise ConfigError(
            f"{tarball} holds {others[0].removesuffix('.jar')}; this testbed runs Cassandra "
            f"{version} (use apache-cassandra-{version}-bin.tar.gz)"
        )
    raise ConfigError(
        f"{tarball} is not an Apache Cassandra binary tarball (no lib/{wanted}); expected "
        f"apache-cassandra-{version}-bin.tar.gz"
    )


def _extract_tarball(tarball: Path, lib: Path) -> None:
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            name = _lib_jar(member)
            if name:
                source = tar.extractfile(member)
                assert source is not None
                with source, open(lib / name, "wb") as out:
                    shutil.copyfileobj(source, out)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
