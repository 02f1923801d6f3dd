"""A node process that is made but never started: its handlers called directly, its sockets closed after."""

from __future__ import annotations

import pytest

from dht.host import ChordHost
from dht.node_config import NodeConfig


@pytest.fixture
def host():
    h = ChordHost(NodeConfig(host="127.0.0.1", port=0, bits=16))
    yield h
    h.close()


@pytest.fixture
def node(host):
    """The process's one ring position (dht/node.py's ChordNode)."""
    return host.node
