"""A quiet ring paces its rounds, and a death brings them back at once (dht/pacing.py).

To see it fail: in `ChordHost._rounds`, take no notice of closed connections (`if closed != seen:` ->
`if False:`): the node is killed just after its predecessor's round, and that predecessor, whose next
round alone mends the ring, finds it dead only at that round, 7-9 periods later (STRETCH, with 10%
jitter), more than HEAL_PERIODS. Or make `Pacing.ran` keep `stretch` at 1: the quiet ring's rounds stay
a period apart.
"""

from __future__ import annotations

import time
from collections import deque

from dht.client import DhtClient
from dht.processes import wait_for
from tests.conftest import PERIOD

STRETCH = 8  # --quiet-stretch (the default)
HEAL_PERIODS = 5.5  # measured: 1.6-2.1 periods (1-4.1 under load before the kill was timed), and 4.05-4.07
# for the unpaced ring before pacing; 7-9 periods when the closed connections are not noticed


def test_a_quiet_ring_paces_its_rounds_and_heals_a_kill_as_fast_as_an_unpaced_one(ring_factory):
    ring = ring_factory(quiet_stretch=STRETCH, vnodes=1)
    ring.start(5)
    ring.wait_consistent(30)
    window = 2 * STRETCH * PERIOD  # 16 periods: 16 rounds unpaced, 2 or 3 at the full stretch
    samples: deque[tuple[float, list[int]]] = deque(maxlen=100)
    with DhtClient(ring.nodes[0].endpoint, timeout=2.0) as client:  # one connection: closing none alarms

        def paced() -> bool:
            now = time.monotonic()
            samples.append((now, [client.info(n.endpoint)["rounds"] for n in ring.nodes]))
            old = [s for s in samples if now - s[0] >= window]
            return bool(old) and all(b - a <= 3 for a, b in zip(old[-1][1], samples[-1][1], strict=True))

        # at the soonest 11.2 s of quiet rounds (8 at each stretch below 8) and then the window's 3.2 s; a
        # call unanswered on a loaded machine starts the climb again (seen: 30 s not enough on a slow one)
        wait_for(paced, 90, interval=0.1, what="rounds STRETCH periods apart on every node")
        victim = ring.nodes[2]
        by_id = sorted(ring.nodes, key=lambda n: n.id)
        before = by_id[by_id.index(victim) - 1]  # only its next round mends the ring: killed just after one
        last = client.info(before.endpoint)["rounds"]
        wait_for(lambda: client.info(before.endpoint)["rounds"] > last, 3 * window, interval=0.01,
                 what="a round of the victim's predecessor")
        ring.kill(victim)
        ring.nodes.remove(victim)
        _, took = ring.wait_consistent(10)
    assert took <= HEAL_PERIODS * PERIOD, f"the ring healed {took / PERIOD:.1f} periods after the kill"
