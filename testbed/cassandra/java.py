"""Find and check the Java runtime Cassandra runs on."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from common.errors import CommandError, ConfigError
from common.runner import run

SUPPORTED_MAJOR = 17


@dataclass(frozen=True)
class Java:
    path: str
    major: int
    version: str


def find_java(explicit: str | None = None) -> Java:
    """The Java 17 runtime to use: ``explicit``, else $JAVA_HOME/bin/java, else ``java`` on PATH.

    Raises ConfigError with what was tried when none is found or its version is not 17.
    """
    if explicit:
        candidate = explicit
        origin = "--java"
    elif os.environ.get("JAVA_HOME"):
        candidate = str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
        origin = "$JAVA_HOME"
    else:
        candidate = shutil.which("java") or ""
        origin = "PATH"
    if not candidate or not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
        raise ConfigError(
            f"Java not found (looked at {origin}: {candidate or 'no java'}). "
            f"Install Java {SUPPORTED_MAJOR} (Debian: apt-get install openjdk-17-jre-headless) "
            f"or pass --java /path/to/java."
        )
    try:
        out = run([candidate, "-version"], timeout=30)
    except CommandError as exc:
        raise ConfigError(f"{candidate} does not run: {exc}") from exc
    text = out.stderr + out.stdout
    match = re.search(r'version "(\d+)(?:\.(\d+))?[^"]*"', text)
    if not match:
        raise ConfigError(f"cannot tell the version of {candidate}: {text.strip()[:200]}")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    if major != SUPPORTED_MAJOR:
        raise ConfigError(
            f"{candidate} is Java {major}; Cassandra 5.0 is run here on Java {SUPPORTED_MAJOR} "
            f"(install openjdk-17-jre-headless or pass --java)"
        )
    return Java(candidate, major, match.group(0).split('"')[1])


def find_javac(purpose: str) -> str:
    """javac of the JDK next to the java in use ($JAVA_HOME, else PATH); ConfigError saying
    what needs it (``purpose``) and which package has it."""
    home = os.environ.get("JAVA_HOME")
    candidate = str(Path(home) / "bin" / "javac") if home else shutil.which("javac")
    if not candidate or not os.access(candidate, os.X_OK):
        raise ConfigError(
            f"javac is needed to build {purpose}: apt-get install openjdk-17-jdk-headless"
        )
    return candidate
