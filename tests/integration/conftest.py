"""Fixtures shared by integration test modules that bring their own `ring` fixture."""

from __future__ import annotations

import pytest

from chordpub.launcher import stop_processes
from tests.helpers.gateway import GatewayProcess


@pytest.fixture
def gateway(ring, tmp_path):  # noqa: ANN001, ANN201 - the module's ring
    """`chordpub gateway` on the module's ring, stopped after the test (tests/helpers/gateway.py)."""
    gw = GatewayProcess(ring.nodes[0].endpoint, tmp_path)
    yield gw
    gw.stop()
    stop_processes([gw.proc], grace=1)
