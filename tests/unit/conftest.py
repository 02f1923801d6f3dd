"""A ChordNode that is made but never started: its handlers called directly, its sockets closed after."""

from __future__ import annotations

import pytest

from dht.node import ChordNode, NodeConfig


@pytest.fixture
def node():
    n = ChordNode(NodeConfig(host="127.0.0.1", port=0, bits=16))
    yield n
    n.server.close()
    n.notifier.close()
