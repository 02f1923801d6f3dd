"""The local driver JVM maps Spark's classes from the cache's class-data archive (traces/class_archive.py).

To see it fail: `jvm_options` returning "" for a usable archive leaves the archive unmapped in the
driver JVM's memory (docs/testing.md lists it)."""

from __future__ import annotations

import os
import subprocess
import sys

from chordpub.launcher import wait_for
from traces.class_archive import archive_path, start_build, usable
from traces.spark import QUICK_JVM, java_binary, spark_jars

SESSION = """
import sys
from traces.spark import session
spark = session("local[1]", app_name="chordpub-class-archive-test")
jvm = spark.sparkContext._gateway.proc.pid
with open(f"/proc/{jvm}/maps") as maps:
    mapped = sys.argv[1] in maps.read()
assert spark.range(100).selectExpr("sum(id)").first()[0] == 4950
spark.stop()
print("mapped" if mapped else "not mapped")
"""


def test_a_local_session_maps_the_class_archive_built_for_its_java_and_jars():
    path = archive_path(java_binary(), spark_jars(), QUICK_JVM)
    if not usable(path):  # a fresh cache: the build the first session starts (or this one)
        start_build(path)
        wait_for(lambda: usable(path), 300, interval=1.0, what=f"the class archive {path}")
    run = subprocess.run([sys.executable, "-c", SESSION, str(path)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SPARK_MASTER": ""})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "mapped", run.stderr[-3000:]
