"""One SparkSession (local[2]) for every Spark test, and helpers that write runs in both formats."""

from __future__ import annotations

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

    s = session("local[2]", app_name="chordpub-tests")
    yield s
    s.stop()
