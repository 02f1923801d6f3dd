"""How the Spark driver JVM is found and started: the Java it needs, its jars, its options.

traces/spark.py's session and traces/class_archive.py's archiving job both start a driver this way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

JAVA_NEEDED = 17
JAVA_HINT = "install a Java runtime (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME to one"


class JavaMissing(RuntimeError):
    """Spark's driver is a Java process: without Java, PySpark fails deep inside with
    JAVA_GATEWAY_EXITED. This says it in one line instead, before any work."""


def java_binary() -> Path | None:
    """The java Spark would start: JAVA_HOME's, else the one on PATH (None when neither is there)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        return java if java.is_file() else None
    found = shutil.which("java")
    return Path(found) if found else None


def java_problem() -> str | None:
    """What is wrong with the Java Spark would start (JAVA_HOME's, else the one on PATH), or None."""
    java = java_binary()
    if java is None:
        home = os.environ.get("JAVA_HOME")
        if home:
            return f"Spark needs Java {JAVA_NEEDED} or newer, and JAVA_HOME={home} has no bin/java: {JAVA_HINT}"
        return f"Spark needs Java {JAVA_NEEDED} or newer, and there is no java on PATH: {JAVA_HINT}"
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Spark needs Java {JAVA_NEEDED} or newer, and {java} does not run ({exc}): {JAVA_HINT}"
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match is None:
        return None  # an unusual build: let Spark judge
    major = int(match.group(1)) if match.group(1) != "1" else int(match.group(2) or 0)
    if major < JAVA_NEEDED:
        return f"Spark needs Java {JAVA_NEEDED} or newer, and {java} is Java {major}: {JAVA_HINT}"
    return None


def check_java() -> None:
    problem = java_problem()
    if problem is not None:
        raise JavaMissing(problem)


QUICK_JVM_BYTES = 64 << 20  # inputs up to this are a short job for a local JVM: no optimizing compiler
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# ... and its plans run without whole-stage code generation or adaptive re-planning: on a cold JVM,
# compiling each query's generated code and planning it again cost more than they save on such inputs
# (measured: a small `analyze`'s first run 14-15.5 JVM CPU-seconds with them, 11.5-12.6 without)
QUICK_SQL = {"spark.sql.codegen.wholeStage": "false", "spark.sql.adaptive.enabled": "false"}


def spark_jars() -> Path | None:
    """The jars the driver JVM runs from (pyspark's own, or SPARK_HOME's)."""
    home = os.environ.get("SPARK_HOME")
    if home:
        jars = Path(home) / "jars"
    else:
        import pyspark

        jars = Path(pyspark.__file__).parent / "jars"
    return jars if jars.is_dir() else None


def local_builder(app_name: str, master: str | None, java_options: str, ui: bool = False):
    """A SparkSession builder with the project's settings; `master` None keeps what spark-submit set."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python tasks (sim paper) need our packages
    builder = SparkSession.builder.appName(app_name).config("spark.ui.enabled", str(ui).lower())
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):
        # local mode talks to itself only: keep the driver on loopback, not on the host's interface
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    log4j = Path(__file__).with_name("log4j2.properties")
    builder = builder.config("spark.driver.extraJavaOptions",
                             f"-Dlog4j.configurationFile={log4j.as_uri()} {java_options}".strip())
    return builder.config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false")
