"""Jars from Maven Central: a throw-away POM naming the artifacts, and Maven's own
resolver (``dependency:copy-dependencies`` with strict checksums) copying them and their
runtime dependencies into a directory. Used for Cassandra and for YCSB."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape

from common.errors import ConfigError
from common.runner import run

Artifact = tuple[str, str, str]  # group, artifact, version


def pom(artifacts: Sequence[Artifact], name: str = "deps") -> str:
    """A POM whose only content is ``artifacts`` as dependencies."""
    deps = "\n".join(
        "    <dependency>\n"
        f"      <groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId>\n"
        f"      <version>{escape(v)}</version>\n"
        "    </dependency>"
        for g, a, v in artifacts
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>edge-testbed</groupId><artifactId>{escape(name)}</artifactId><version>1</version>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def _mvn(name: str, pom_text: str, workdir: Path, goal: Sequence[str]) -> None:
    """Maven with strict checksums on a throw-away POM in ``workdir``: ``goal`` and its
    -D properties; ConfigError when Maven is missing (fetching ``name``)."""
    if shutil.which("mvn") is None:
        raise ConfigError(f"Maven (mvn) is needed to fetch {name}: apt-get install maven")
    path = workdir / "pom.xml"
    path.write_text(pom_text)
    run(["mvn", "-B", "-q", "--strict-checksums", "-f", str(path), *goal], timeout=1800)


def copy_dependencies(
    artifacts: Sequence[Artifact], workdir: Path, lib: Path, name: str = "deps"
) -> None:
    """``artifacts`` and their runtime dependencies into ``lib`` (resolved by Maven, checksums
    checked); ConfigError when Maven is missing, CommandError when resolution fails."""
    goal = ["dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={lib}"]
    _mvn(name, pom(artifacts, name), workdir, goal)


def copy_artifact(artifact: Artifact, classifier: str, workdir: Path, out: Path) -> Path:
    """One artifact's ``classifier`` jar (``sources``: its Java sources) into ``out``, alone
    (no dependencies; checksums checked); its path. Errors as ``copy_dependencies``."""
    group, name, version = artifact
    coordinates = f"{group}:{name}:{version}:jar:{classifier}"
    goal = ["dependency:copy", f"-Dartifact={coordinates}", f"-DoutputDirectory={out}"]
    _mvn(name, pom([], "single-artifact"), workdir, goal)
    return out / f"{name}-{version}-{classifier}.jar"
