"""A client renews its registrations at every owner at once, so owners that do not answer delay no
other owner's renewals (pubsub/registrar.py): one after another, three silent owners held a live
owner's renewal three heartbeats, its whole lease.

To see it fail: make `Registrar._renew` send one `records_at(owner, items, timeout=self.heartbeat,
retries=0)` after another instead of `records_at_each`: "a renewal round took 3.01s"."""

from __future__ import annotations

import time

import zmq

from pubsub.registrar import MIN_PLACE_WAIT, PLACE_WAIT, Registrar
from pubsub.registration import Registration

HEARTBEAT = 1.0


def test_silent_owners_delay_no_other_owners_renewals(ring_factory, parts):
    ring = ring_factory()
    ring.start(1)
    live = ring.nodes[0].endpoint
    silent = []  # owners whose process takes requests and never answers (a stopped or swamped node)
    for _ in range(3):
        sock = parts.context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        silent.append((sock, f"127.0.0.1:{port}"))
    registrar = Registrar(live, parts.context, None, heartbeat=HEARTBEAT)
    try:
        held = [Registration(f"t{i}", "pub/me", b"x", watch=False, owner=live) for i in range(20)]
        for reg in held:
            registrar.register(reg)
        registrar._place()
        assert all(r.placed for r in held), "placement at the live node failed"
        stranded = [Registration(f"s{i}", "pub/me", b"x", watch=False, owner=endpoint, placed=True)
                    for i, (_sock, endpoint) in enumerate(silent)]
        for reg in stranded:
            registrar.register(reg)
        for _round in range(2):
            started = time.monotonic()
            registrar._renew()
            took = time.monotonic() - started
            # at once: one heartbeat for the slowest; one after another it was three
            assert took < 2 * HEARTBEAT, f"a renewal round took {took:.2f}s"
            assert all(r.placed and r.missed == 0 for r in held), "the live owner's renewals failed"
        assert all(r.owner is None and not r.placed for r in stranded), \
            "a second silent renewal in a row must send the field round again"
        for sock, _endpoint in silent:
            assert sock.poll(0), "the silent owner was never asked"
    finally:
        registrar.close_unstarted()
        for sock, _endpoint in silent:
            sock.close(0)


def test_a_rounds_fields_past_one_messages_bytes_go_in_parts_and_are_all_placed(ring_factory, parts):
    """4,096 fields of 300 bytes for one owner (a publisher's first round of 1,400 new topics and their
    announcements) are 1.3 MB: one request, within the item bound, past the message limit, which the
    node's socket drops unanswered, round after round. In parts within the limit, all are placed.

    To see it fail: `PART_BYTES = 10**9` in dht/client.py: "placed 0 of 4096"."""
    ring = ring_factory()
    ring.start(1)
    live = ring.nodes[0].endpoint
    registrar = Registrar(live, parts.context, None, heartbeat=HEARTBEAT)
    try:
        held = [Registration(f"bulk/{i % 50}/{i}", "pub/me", b"p" * 300, watch=False, owner=live)
                for i in range(4096)]
        for reg in held:
            registrar.register(reg)
        registrar._place()
        placed = sum(r.placed for r in held)
        assert placed == len(held), f"placed {placed} of {len(held)}"
    finally:
        registrar.close_unstarted()


def test_a_ring_silent_at_the_first_question_leaves_the_registrar_running(parts):
    """The registrar's first look at the ring asks its entry node the id width; a node too busy to
    answer (a loaded machine: the suite's CI) made that a DhtError that ended the registrar's thread,
    and every later registration of the client failed. Now the fields wait and are sent again.

    To see it fail, take `self.dht.bits` out of its try in `Registrar._place`: DhtError."""
    silent = parts.context.socket(zmq.ROUTER)  # takes the request and never answers
    silent.setsockopt(zmq.LINGER, 0)
    endpoint = f"127.0.0.1:{silent.bind_to_random_port('tcp://127.0.0.1')}"
    registrar = Registrar(endpoint, parts.context, None, heartbeat=HEARTBEAT)
    try:
        reg = Registration("t", "pub/me", b"x", watch=False)
        registrar.register(reg)
        before = time.monotonic()
        registrar._place()
        assert silent.poll(0), "the entry node was never asked"
        assert not reg.placed and reg.retry_at > before, "the field waits to be sent again"
    finally:
        registrar.close_unstarted()
        silent.close(0)


def test_a_placement_at_a_silent_owner_waits_no_more_than_the_renewals_allow(parts):
    """Placements wait for their owners in the registrar's one thread, before the next renewal round:
    at a fresh node slow to answer, two rounds of PLACE_WAIT (2 s) came between two renewals, and the
    fields of live owners, leased three heartbeats (3 s), lapsed (the Mininet autoscale test's lost
    registrations). A placement now waits at most a heartbeat past the renewal that is due.

    To see it fail, give `_place_wait` PLACE_WAIT whatever `until` says: "took 2.0s"."""
    silent = parts.context.socket(zmq.ROUTER)  # a node that takes the placement and does not answer in time
    silent.setsockopt(zmq.LINGER, 0)
    endpoint = f"127.0.0.1:{silent.bind_to_random_port('tcp://127.0.0.1')}"
    registrar = Registrar(endpoint, parts.context, None, heartbeat=HEARTBEAT / 4)
    registrar.dht._bits = 64  # (the id width, which a node would have answered first)
    try:
        reg = Registration("t", "pub/me", b"x", watch=False, owner=endpoint)
        registrar.register(reg)
        started = time.monotonic()
        registrar._place(until=started)  # the renewal round is due now
        took = time.monotonic() - started
        assert silent.poll(0), "the owner was never asked"
        assert not reg.placed
        assert took < (MIN_PLACE_WAIT + PLACE_WAIT) / 2, f"took {took:.1f}s"  # (0.25 s: a loaded machine's margin)
    finally:
        registrar.close_unstarted()
        silent.close(0)
