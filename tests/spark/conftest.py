"""One SparkSession for every Spark test (the suite's Spark Connect server's when SPARK_MASTER names one, as
`make test` does: tests/plugin_spark.py; else local[2]), and helpers that write runs in both formats."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import IN_CI


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        if IN_CI:
            pytest.fail("Java is needed for the Spark tests and is not on PATH")
        pytest.skip("no Java on PATH")
    from traces.spark import session

    s = session(os.environ.get("SPARK_MASTER") or "local[2]", app_name="chordpub-tests")
    yield s
    s.stop()
