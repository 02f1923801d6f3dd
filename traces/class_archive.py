"""A class-data archive for the local Spark driver JVM (application class-data sharing, JEP 310 and
JEP 350's dynamic archives, JDK 13+).

A Spark driver loads some ten thousand classes from its jars before it runs anything; mapping them from
an archive instead costs a third less (measured on this project's machine: 12 CPU-s and 11 s of wall
time for a session and one small aggregation without, 8 CPU-s and 7 s with). Every notebook, `analyze`
and `study report` starts such a JVM, so the saving is paid back from the second one on.

An archive belongs to one Java runtime and one set of jars, so it is named by a digest of both and kept
in the user's cache (CHORDPUB_CACHE, else $XDG_CACHE_HOME/chordpub, else ~/.cache/chordpub): the newest
KEEP_ARCHIVES of them stay. The first session that finds none goes on without it and starts, in the
background, one short job of its own (`python -m traces.class_archive PATH`) in a JVM that writes the
archive when it exits (-XX:ArchiveClassesAtExit); the archive is moved into place only once that JVM
has exited cleanly, with its size written beside it. `python -m traces.class_archive` with no argument
builds the archive a quick local session would map, and waits for it: `make test` does so before the
tests, whose sessions would otherwise start together and map none. A session uses an archive only when its size is the
one written (a cut-short file would crash the JVM), and with -XX:+VerifySharedSpaces, so a damaged one is
checked and skipped by the JVM itself: an archive can only ever cost the saving, never a run.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEEP_ARCHIVES = 3  # archives kept in the cache (each of some 150 MB): other venvs', other Javas'
BUILD_STALE_S = 600.0  # a build marker older than this is from a build that died: another may start
BUILD_TIMEOUT_S = 300.0  # the archiving JVM's run and dump, at most


def cache_dir() -> Path:
    explicit = os.environ.get("CHORDPUB_CACHE")
    if explicit:
        return Path(explicit) / "spark-classes"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chordpub" / "spark-classes"


def archive_path(java: Path, jars: Path, jvm_options: str) -> Path:
    """Where the archive for this Java, these jars and these JVM options is (whether or not it exists)."""
    digest = hashlib.sha256()
    real = java.resolve()
    stat = real.stat()
    digest.update(f"{real}:{stat.st_size}:{stat.st_mtime_ns}\n{jvm_options}\n".encode())
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        digest.update(f"{jar}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return cache_dir() / f"{digest.hexdigest()[:24]}.jsa"


def usable(path: Path) -> bool:
    """The archive exists, whole: its size is the one written when it was moved into place."""
    try:
        return path.stat().st_size == int(path.with_suffix(".size").read_text())
    except (OSError, ValueError):
        return False


def jvm_options(path: Path) -> str:
    """The driver's options that map a usable archive; '' when there is none (a build is then started in
    the background unless one is under way)."""
    if usable(path):
        return f"-XX:SharedArchiveFile={path} -XX:+VerifySharedSpaces -Xlog:disable -Xlog:all=warning:stderr"
    start_build(path)
    return ""


def _building(path: Path) -> Path:
    return path.with_suffix(".building")


def start_build(path: Path) -> None:
    """Start `python -m traces.class_archive PATH` detached, unless a build of it is under way."""
    marker = _building(path)
    try:
        if time.time() - marker.stat().st_mtime < BUILD_STALE_S:
            return
    except OSError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        log = open(path.with_suffix(".log"), "ab")  # noqa: SIM115 - handed to the child
    except OSError:
        return  # no cache to write: go without
    with log:
        subprocess.Popen([sys.executable, "-m", "traces.class_archive", str(path)], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, cwd=str(path.parent))


def _claim(marker: Path) -> bool:
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            if time.time() - marker.stat().st_mtime < BUILD_STALE_S:
                return False
            marker.unlink()
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except OSError:
            return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def build(path: Path) -> bool:
    """Run one small job in a driver JVM that archives the classes it loaded at its exit; move the
    archive into place once that JVM has exited with 0. True when it is there."""
    from traces.spark_driver import QUICK_JVM, local_builder

    marker = _building(path)
    if usable(path) or not _claim(marker):
        return usable(path)
    part = path.with_suffix(f".part{os.getpid()}")
    try:
        options = (f"{QUICK_JVM} -XX:ArchiveClassesAtExit={part} -XX:+VerifySharedSpaces"
                   " -Xlog:disable -Xlog:all=error:stderr")  # the dump's many warnings: not worth a log
        spark = local_builder("chordpub-class-archive", "local[2]", options).getOrCreate()
        jvm = spark.sparkContext._gateway.proc  # the driver JVM pyspark started: it dumps when it exits
        with tempfile.TemporaryDirectory() as tmp:  # the classes an analysis loads: JSON, Parquet, aggregates
            rows = spark.createDataFrame([(i, i % 7, float(i)) for i in range(2000)], ["a", "b", "c"])
            rows.write.json(f"{tmp}/j")
            rows.write.parquet(f"{tmp}/p")
            read = spark.read.json(f"{tmp}/j").unionByName(spark.read.parquet(f"{tmp}/p"))
            read.groupBy("b").agg({"c": "avg", "a": "max"}).collect()
            read.selectExpr("percentile_approx(c, 0.99)").collect()
        spark.stop()
        jvm.stdin.close()
        if jvm.wait(BUILD_TIMEOUT_S) != 0 or not part.is_file():
            return False
        path.with_suffix(".size").write_text(str(part.stat().st_size))
        part.replace(path)
        prune(path.parent, keep=path)
        return True
    finally:
        part.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)


def prune(folder: Path, keep: Path) -> None:
    """Only the newest KEEP_ARCHIVES archives stay (each belongs to a venv or a Java that may be gone)."""
    archives = sorted(folder.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [p for p in archives if p != keep][KEEP_ARCHIVES - 1:]:
        for suffix in (".jsa", ".size", ".log"):
            old.with_suffix(suffix).unlink(missing_ok=True)


def warm() -> str:
    """Build, and wait for, the archive a quick local session maps (a build under way elsewhere is
    waited for); says what happened, in one line."""
    from traces.spark_driver import QUICK_JVM, java_binary, spark_jars

    java, jars = java_binary(), spark_jars()
    if java is None or jars is None:
        return "no Java or no Spark jars: no class archive for the Spark driver"
    path = archive_path(java, jars, QUICK_JVM)
    if usable(path):
        return f"the Spark driver's class archive is there: {path}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"no cache for the Spark driver's class archive ({exc})"
    t0 = time.monotonic()
    deadline = t0 + BUILD_STALE_S
    while not build(path) and time.monotonic() < deadline:
        if not _building(path).exists():
            return f"the Spark driver's class archive could not be built (see {path.with_suffix('.log')})"
        time.sleep(1.0)  # another process builds it: its marker goes when it is done
    if not usable(path):
        return f"the Spark driver's class archive could not be built in time (see {path.with_suffix('.log')})"
    return f"the Spark driver's class archive built in {time.monotonic() - t0:.0f} s: {path}"


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(0 if build(Path(sys.argv[1])) else 1)
    print(warm())
