"""Which class-data archive a local Spark driver is given (traces/class_archive.py): only a whole one.

To see it fail: `usable` trusting any file that exists hands a cut-short archive to the JVM, which
would crash mapping it (docs/testing.md lists it)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from traces import class_archive
from traces.class_archive import archive_path, jvm_options, prune, usable


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CHORDPUB_CACHE", str(tmp_path))
    return tmp_path / "spark-classes"


def fake_jars(tmp_path: Path) -> tuple[Path, Path]:
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n")
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"x" * 10)
    return java, jars


def test_the_archive_is_named_by_the_java_the_jars_and_the_options(cache, tmp_path):
    java, jars = fake_jars(tmp_path)
    first = archive_path(java, jars, "-XX:+UseSerialGC")
    assert first.parent == cache and first.suffix == ".jsa"
    assert archive_path(java, jars, "-XX:+UseSerialGC") == first
    assert archive_path(java, jars, "-XX:+UseG1GC") != first
    (jars / "spark-sql.jar").write_bytes(b"y")
    assert archive_path(java, jars, "-XX:+UseSerialGC") != first  # new jars, new archive


def test_only_an_archive_of_the_size_written_is_used_and_a_missing_one_starts_one_build(cache, tmp_path,
                                                                                        monkeypatch):
    java, jars = fake_jars(tmp_path)
    path = archive_path(java, jars, "")
    started: list[Path] = []
    monkeypatch.setattr(class_archive.subprocess, "Popen", lambda args, **kw: started.append(Path(args[-1])))
    assert jvm_options(path) == "" and started == [path]  # none yet: built in the background
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * 1000)
    path.with_suffix(".size").write_text("4096")  # cut short after its size was written
    assert not usable(path)
    path.with_suffix(".building").write_text("1")  # a build under way: no second one
    assert jvm_options(path) == "" and started == [path]
    path.with_suffix(".size").write_text("1000")
    assert usable(path)
    options = jvm_options(path)
    assert f"-XX:SharedArchiveFile={path}" in options and "-XX:+VerifySharedSpaces" in options
    assert "-Xlog:all=warning:stderr" in options  # never a word on a command's stdout


def test_a_stale_build_marker_lets_another_build_start(cache, tmp_path, monkeypatch):
    java, jars = fake_jars(tmp_path)
    path = archive_path(java, jars, "")
    started: list[Path] = []
    monkeypatch.setattr(class_archive.subprocess, "Popen", lambda args, **kw: started.append(Path(args[-1])))
    cache.mkdir(parents=True)
    marker = path.with_suffix(".building")
    marker.write_text("1")
    old = time.time() - class_archive.BUILD_STALE_S - 1
    os.utime(marker, (old, old))
    jvm_options(path)
    assert started == [path]


def test_only_the_newest_archives_stay(cache):
    cache.mkdir(parents=True)
    paths = []
    for i in range(5):
        p = cache / f"a{i}.jsa"
        p.write_bytes(b"x")
        p.with_suffix(".size").write_text("1")
        os.utime(p, (1000 + i, 1000 + i))
        paths.append(p)
    prune(cache, keep=paths[0])
    kept = sorted(p.name for p in cache.glob("*.jsa"))
    assert kept == ["a0.jsa", "a3.jsa", "a4.jsa"]  # the one just made and the newest others
    assert not (cache / "a1.size").exists()


def test_warming_waits_for_a_build_under_way_elsewhere_and_says_what_it_found(cache, monkeypatch):
    """`python -m traces.class_archive` (make test, before pytest): no Java, no archive; one there is
    said to be there; one another process builds is waited for, not built twice."""
    from traces.spark_driver import QUICK_JVM, java_binary, spark_jars

    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jdk")
    assert class_archive.warm().startswith("no Java")
    monkeypatch.delenv("JAVA_HOME")
    path = archive_path(java_binary(), spark_jars(), QUICK_JVM)
    cache.mkdir(parents=True)
    marker = path.with_suffix(".building")
    marker.write_text("1")  # another build under way: it ends with the archive in place
    sleeps = []

    def other_build_ends(seconds: float) -> None:
        sleeps.append(seconds)
        path.write_bytes(b"\0" * 10)
        path.with_suffix(".size").write_text("10")
        marker.unlink()

    monkeypatch.setattr(class_archive.time, "sleep", other_build_ends)
    assert class_archive.warm().startswith("the Spark driver's class archive built in")
    assert len(sleeps) == 1
    assert class_archive.warm().startswith("the Spark driver's class archive is there")
