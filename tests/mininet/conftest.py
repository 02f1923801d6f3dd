"""Mininet tests need root and Debian's mininet; under CI=true their absence is a failure, not a skip."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import IN_CI
from topologies.mininet_net import MininetError, check_runnable, leftovers


@contextmanager
def host_left_clean() -> Iterator[None]:
    """Skip (fail under CI) without Mininet; when the block ends, assert no bridge, namespace, veth or
    mininet/chordpub/switch process is left that was not there before, also when it failed."""
    try:
        check_runnable()
    except MininetError as exc:
        if IN_CI:
            pytest.fail(f"Mininet is needed under CI: {exc}")
        pytest.skip(str(exc))
    before = leftovers()
    yield
    after = leftovers()
    # what is new; a network's clean-up may also take away what an earlier, interrupted run left
    new = {kind: sorted(set(after[kind]) - set(before[kind])) for kind in after}
    assert not any(new.values()), f"bridges, namespaces, interfaces or processes were left behind: {new}"


@pytest.fixture
def clean_host():
    """`host_left_clean` around one test."""
    with host_left_clean():
        yield
