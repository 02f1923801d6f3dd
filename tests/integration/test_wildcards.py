"""Pattern subscriptions over the ring (pubsub/patterns.py): a pattern placed at its prefix record
learns the topics publishers announce there, old and new, and receives exactly what it matches.

Long because it holds the acceptance of pattern subscriptions whole: what a pattern receives, groups,
durable patterns, a killed prefix owner, new topics' first messages, thousands of topics and their
memory, each sharing the module's ring."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import pytest

from chordpub import Client
from chordpub.launcher import wait_for
from dht.client import DhtClient
from dht.spawner import start as start_command
from pubsub import io_loop
from pubsub.coalescing import COALESCE_MAX
from pubsub.io_loop import BATCH
from pubsub.patterns import PatternFollower
from tests.conftest import jsonl, start_module_ring

HB = 0.3
BULK_HB = 1.0  # a client holding thousands of fields: renewed every HB, they lapsed on a loaded machine


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "wildcard-ring", 3)


def drain(sub, got: list, n: int, timeout: float = 20) -> None:  # noqa: ANN001
    def enough() -> bool:
        for _ in range(1000):
            if (m := sub.get(timeout=0.05)) is None:
                break
            got.append(m)
        return len(got) >= n

    try:
        wait_for(enough, timeout, what=f"{n} messages")
    except TimeoutError as exc:
        raise AssertionError(f"{len(got)} of {n} messages within {timeout:g}s{shortfall(sub, got)}") from exc


def shortfall(sub, got: list) -> str:  # noqa: ANN001
    """For a pattern subscription that came up short: its topics that delivered least, and what its
    client's io loop holds of each (said when a test fails)."""
    follower, io = sub.pattern, getattr(sub, "_wake_io", None)
    if follower is None:
        return ""
    client_io = getattr(io, "__self__", None)  # the io loop whose `wake` the subscription was given
    counts = Counter(m.topic for m in got)
    thin = sorted(set(follower.topics) | set(counts), key=lambda t: counts[t])[:4]
    out = []
    for topic in thin:
        ts = client_io.topics.get(topic) if client_io is not None else None
        streams = [] if ts is None else [{k: getattr(st, k) for k in ("expected", "live_high", "fetching", "confirmed",
                                                                        "unretained_to")} for st in ts.streams.values()]
        shared = client_io is not None and sub in client_io.shared.get(topic, [])
        out.append(f"{topic}: {counts[topic]} delivered, followed {topic in follower.topics}, shared {shared}, "
                   f"primary {client_io is not None and client_io.handles.get(topic) is sub}, streams {streams}")
    return f"; {len(follower.topics)} topics followed, {follower.returned} followed again; least delivered: {out}"


KIB_PER_FOLLOWED_TOPIC = 32  # a followed topic's state: its streams, filters, windows (11.5 KiB measured)


def drained(sub, got: list) -> int:  # noqa: ANN001
    while (m := sub.get(timeout=0.05)) is not None:
        got.append(m)
    return len(got)


@contextmanager
def held_attach(client: Client, topic: str) -> Iterator[None]:
    """`client` takes up `topic` (a pattern's new topic) only when the block ends: its io loop waits."""
    go = threading.Event()
    attach = client.io.attach

    def late(ts, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if ts.topic == topic:
            go.wait(30)
        return attach(ts, *args, **kwargs)

    client.io.attach = late
    try:
        yield
    finally:
        go.set()
        del client.io.attach  # the class's own again


def settled(client: Client, topic: str) -> bool:
    """The owner and prefix records answered `topic`'s registration (it may still wait for filters)."""
    pending = [r for r in client.publisher.advertiser._pending if r.topic == topic]
    return not pending or pending[0].subscribers >= 0


def test_a_pattern_receives_exactly_the_topics_it_matches_and_a_topic_that_appears_later(ring):
    """Publishers of device topics dev/<i>/temp and dev/<i>/hum; `dev/*/temp` gets every temp message
    and no hum, `dev/>` everything, reliable ones each topic in order from its first message, and a
    device that appears after the subscribers from its first message on.

    To see it fail, make the publisher announce nothing (`announced_at` returning []): the patterns
    then learn of no topic; or not wait for the prefix records' pattern subscribers (`plain = 0`): the
    best-effort pattern, held from taking the new topic until the publisher has its answers, misses
    the topic's first messages."""
    via = ring.nodes[0].endpoint
    devices, each = 20, 5
    with Client(via, heartbeat=HB) as a, Client(via, heartbeat=HB) as b, Client(via, heartbeat=HB) as sub, \
            Client(via, heartbeat=HB) as watcher:
        for i in range(devices):
            pub = a if i % 2 else b
            pub.advertise(f"dev/{i}/temp", reliable=True)
            pub.advertise(f"dev/{i}/hum", reliable=True)
        temp = sub.subscribe("dev/*/temp", reliable=True)
        everything = sub.subscribe("dev/#", reliable=True)  # MQTT's spelling of dev/>
        plain = sub.subscribe("dev/+/temp/>")  # matches none of the devices' topics
        best_effort = watcher.subscribe("dev/new/*")  # best effort, alone in its client: no history to lean on
        for n in range(each):
            for i in range(devices):
                pub = a if i % 2 else b
                pub.publish(f"dev/{i}/temp", f"t{n}")
                pub.publish(f"dev/{i}/hum", f"h{n}")
        got_temp: list = []
        got_all: list = []
        drain(temp, got_temp, devices * each)
        drain(everything, got_all, 2 * devices * each)
        with Client(via, heartbeat=HB) as newcomer:  # a device that appears while they listen
            with held_attach(watcher, "dev/new/temp"):  # the best-effort pattern takes the topic late
                for n in range(each):
                    newcomer.publish("dev/new/temp", f"t{n}")
                wait_for(lambda: settled(newcomer, "dev/new/temp"), 20, what="the new topic's registration answered")
            drain(temp, got_temp, (devices + 1) * each)
            drain(everything, got_all, (2 * devices + 1) * each)
            got_new: list = []
            drain(best_effort, got_new, each)
        assert [m.text for m in got_new] == [f"t{n}" for n in range(each)], \
            "a best-effort pattern gets a new topic from its first message: the publisher waited for its filter"
        assert plain.get(timeout=0.1) is None
        assert temp.get(timeout=0.3) is None, "nothing more than the temp messages"
    assert {m.topic for m in got_temp} == {f"dev/{i}/temp" for i in range(devices)} | {"dev/new/temp"}
    assert len(got_all) == (2 * devices + 1) * each
    assert Counter(m.topic for m in got_all) == Counter(
        {**{f"dev/{i}/{k}": each for i in range(devices) for k in ("temp", "hum")}, "dev/new/temp": each})
    for topic in {m.topic for m in got_temp}:
        assert [m.text for m in got_temp if m.topic == topic] == [f"t{n}" for n in range(each)], topic
        assert [m.seq for m in got_temp if m.topic == topic] == list(range(1, each + 1)), topic


def test_a_reliable_pattern_owes_a_topic_it_meets_late_from_seq_1(ring):
    """A topic a reliable pattern meets after its first read (here: followed only once the plain
    publisher had given up waiting for the pattern's filter and sent) is owed from seq 1: the messages
    the publisher still keeps for late subscribers (its late hold) are fetched and delivered in order,
    and those it no longer keeps are a dead letter, never skipped unseen.

    To see it fail, take a late topic from its publisher's next seq (`owe_from_first` doing nothing):
    the kept messages are never asked for, and nothing says the others are missing."""
    via = ring.nodes[1].endpoint
    letters: list = []
    announced: dict[str, list] = {}  # topics the pattern's record announced, not followed until released
    # the publisher's heartbeat sets its wait for known filters and then its late hold (3 heartbeats each, at
    # least 3 s): 4.5 s leaves a loaded machine room to fetch within the hold
    with Client(via, heartbeat=HB, on_dead_letter=letters.append) as sub, Client(via, heartbeat=1.5) as pub:
        pattern = sub.subscribe("late/*", reliable=True)
        follower = pattern.pattern
        attach = follower._attach
        follower._attach = lambda topic, entries: announced.__setitem__(topic, entries)  # (registrar thread)
        for topic in ("late/kept", "late/gone"):
            for i in range(3):
                pub.publish(topic, f"{topic}:{i}")
        publishing = pub.publisher.publishing
        wait_for(lambda: len(announced) == 2 and all(settled(pub, t) and t not in publishing.held for t in announced),
                 30, what="the publisher done waiting for the pattern's filter, its messages sent")
        attach("late/kept", announced["late/kept"])  # within the publisher's late hold
        kept: list = []
        drain(pattern, kept, 3)
        wait_for(lambda: not len(publishing.publications["late/gone"].history), 30,
                 what="the late hold over, the messages let go")
        attach("late/gone", announced["late/gone"])
        wait_for(lambda: letters, 30, what="a dead letter for what is no longer kept")
    assert [(m.topic, m.seq, m.text, m.recovered) for m in kept] == [
        ("late/kept", i + 1, f"late/kept:{i}", True) for i in range(3)]
    assert [(d.topic, d.from_seq, d.to_seq) for d in letters] == [("late/gone", 1, 3)]


def test_a_publisher_sends_a_new_topic_to_a_listening_pattern_before_the_ring_answers_its_registration(ring):
    """A publisher connected to a pattern subscriber (for an earlier topic) holds that subscriber's
    pattern filter and matches its own topics against it: the first message on a brand-new topic goes
    to the pattern at once, kept back only from exact subscribers until the ring has answered the
    topic's registration, and the subscriber follows the topic from that frame, before any
    announcement of it.

    To see it fail, make `Coalescer.early` return at once: the message waits for the registration,
    which the test holds back."""
    via = ring.nodes[0].endpoint
    with Client(via, heartbeat=HB) as pub, Client(via, heartbeat=HB) as sub:
        fast = sub.subscribe("fast/*")
        pub.publish("fast/0", "warm")  # the publisher waits for the pattern's filter: it arrives
        first = fast.get(timeout=20)
        assert first is not None and first.text == "warm"
        hold = threading.Event()
        pub.registrar.call(lambda: hold.wait(30))  # the ring hears of nothing new meanwhile
        try:
            pub.publish("fast/1", "new")
            got = fast.get(timeout=10)
            assert "fast/1" in pub.publisher.publishing.held, "still registering: no answer was waited for"
        finally:
            hold.set()
        assert got is not None and (got.topic, got.text, got.seq) == ("fast/1", "new", 1)
        assert sub.io.topics["fast/1"].via_pattern == "fast/*"


def test_a_new_topic_reaches_a_subscriber_already_listening_before_the_ring_answers_its_registration(ring):
    """A subscriber connected to a publisher (for an earlier topic) that subscribed a topic the publisher
    has never published: the topic's first messages reach it at once, while the publisher's registration
    of the topic is held back, from a publisher the topic's record does not name yet. Once the ring has
    answered, the publisher's release sends none of them again, and the record names the publisher.

    To see it fail, make `Coalescer.early_exact` return at once (the messages wait for the registration,
    which the test holds back), or `IoLoop._meet_publisher` (they wait among the topic's strangers for its
    record, which that registration writes), or `send_released` send to the exact subscribers again
    (each comes twice: counted duplicates), or `IoLoop._drain_sub` not turn the collector back on."""
    with Client(ring.nodes[1].endpoint, heartbeat=HB) as pub, Client(ring.nodes[2].endpoint, heartbeat=HB) as sub:
        warm, fresh = sub.subscribe("early-warm"), sub.subscribe("early-new")
        pub.publish("early-warm", "warm")  # connects the subscriber to the publisher
        assert (m := warm.get(timeout=20)) is not None and m.text == "warm"
        hold = threading.Event()
        pub.registrar.call(lambda: hold.wait(30))  # the ring hears of nothing new meanwhile
        try:
            pub.publish("early-new", "first")
            pub.publish("early-new", "second")
            got = [fresh.get(timeout=10), fresh.get(timeout=10)]
            assert "early-new" in pub.publisher.publishing.held, "still registering: no answer was waited for"
        finally:
            hold.set()
        assert [(m.seq, m.text) for m in got if m is not None] == [(1, "first"), (2, "second")]
        wait_for(lambda: "early-new" not in pub.publisher.publishing.held, 20, what="the registration answered")
        pub.publish("early-new", "third")
        assert (m := fresh.get(timeout=10)) is not None and (m.seq, m.text) == (3, "third")
        assert fresh.stats.duplicates == 0, "the release sent them again"
        wait_for(lambda: not sub.io.topics["early-new"].streams[pub.id].provisional, 20,
                 what="the record naming the publisher")
        wait_for(gc.isenabled, 10, what="the io loop turning the garbage collector back on after a batch")  # (it is
        # off while the io loop takes a batch, which may still be under way when the last message is handed over)


def test_a_topic_a_patterns_frame_met_and_never_announced_is_let_go_and_followed_again_once_announced(ring):
    """A pattern subscriber meets a new topic by its first frame, before its announcement; held back
    from the ring, the announcement never comes, and after PROVISIONAL_BEATS heartbeats the topic is
    no longer followed. Once the publisher's registration goes through, the announcement brings it back.

    To see it fail, never let such a topic go (`IoLoop._run_timers` leaving `self._met` alone: its
    `while met and met[0][0] <= now:` made `while False:`)."""
    with Client(ring.nodes[1].endpoint, heartbeat=HB) as pub, Client(ring.nodes[2].endpoint, heartbeat=HB) as sub:
        topics = sub.subscribe("lapse/*")
        pub.publish("lapse/warm", "warm")  # announced: the subscriber connects to the publisher
        assert (m := topics.get(timeout=20)) is not None and m.topic == "lapse/warm"
        hold = threading.Event()
        pub.registrar.call(lambda: hold.wait(30))  # the ring hears of nothing new meanwhile
        try:
            pub.publish("lapse/new", "first")
            assert (m := topics.get(timeout=10)) is not None and (m.topic, m.text) == ("lapse/new", "first")
            assert sub.io.topics["lapse/new"].provisional, "met by its frame, not announced"
            wait_for(lambda: "lapse/new" not in sub.io.topics, 6 * max(HB, io_loop.LEAVE_HEARTBEAT) + 10,
                     what="the unannounced topic let go")
        finally:
            hold.set()
        wait_for(lambda: "lapse/new" in sub.io.topics and not sub.io.topics["lapse/new"].provisional, 20,
                 what="the announcement following it again")
        # with its renewals held too, lapse/warm was let go as well: the subscriber left the publisher and
        # connects to it again, and a best-effort subscription is owed what comes once its filter is there
        # (its probe back: a clean-clone run published before that and lost the message)
        streams = sub.io.topics["lapse/new"].streams
        wait_for(lambda: streams and all(st.confirmed for st in streams.values()), 20,
                 what="the subscription to it confirmed again")
        pub.publish("lapse/new", "second")
        m = topics.get(timeout=10)
        ts = sub.io.topics.get("lapse/new")  # (read beside the io loop: a glance, said when it fails)
        held = [{k: getattr(st, k) for k in ("catching_up", "fetching", "probing", "confirmed", "start_on_probe")}
                | {"held": len(st.held), "highest": st.window.highest} for st in ts.streams.values()] if ts else None
        assert m is not None and (m.topic, m.text) == ("lapse/new", "second"), (m, held, topics.pattern.returned)


def test_a_new_topic_whose_registration_fails_dead_letters_what_it_held_and_says_what_went_early(ring):
    """A new topic whose registration fails (no answer within the publisher's timeout) drops the
    messages it held as one dead letter; the messages that went at once to a subscriber already
    connected reached it, and the dead letter says so.

    To see it fail, leave that out of the dead letter's reason (`early` not read in
    `Publisher._advertised`)."""
    letters: list = []
    with Client(ring.nodes[1].endpoint, heartbeat=HB, timeout=3.0, on_dead_letter=letters.append) as pub, \
            Client(ring.nodes[2].endpoint, heartbeat=HB) as sub:
        warm, fresh = sub.subscribe("lost-warm"), sub.subscribe("lost-new")
        pub.publish("lost-warm", "warm")  # connects the subscriber to the publisher
        assert (m := warm.get(timeout=20)) is not None and m.text == "warm"
        hold = threading.Event()
        pub.registrar.call(lambda: hold.wait(30))  # the ring never hears of the new topic in time
        try:
            pub.publish("lost-new", "first")
            assert (m := fresh.get(timeout=10)) is not None and (m.seq, m.text) == (1, "first")
            wait_for(lambda: letters, 20, what="the dead letter of the topic that was never registered")
        finally:
            hold.set()
        [letter] = letters
        assert (letter.topic, letter.from_seq, letter.to_seq) == ("lost-new", 1, 1)
        assert "could not be registered" in letter.reason
        assert "up to seq 1 they went to the subscribers already connected" in letter.reason, letter.reason


@pytest.mark.parametrize("warm, topic, subscribed", [("heldx-other", "heldx-new", "heldx-new"),
                                                      ("held/other", "held/new/1", "held/new/*")],
                         ids=["exact", "pattern"])
def test_a_subscription_made_while_a_new_topic_registers_gets_what_it_held_once_its_filter_comes(
        ring, warm, topic, subscribed):
    """A publisher whose new topic is still registering holds its messages and has stopped publishing;
    a subscriber already connected to it (for another topic) subscribes the topic, or a pattern matching
    it, meanwhile: the held messages go to it as soon as its filter reaches the publisher, read between
    the advertiser's looks, before the registration is answered and long before the publisher's own
    heartbeat reads its filters.

    To see it fail, make `Advertiser` read no filters between its looks (`self._drain()` gone): they wait
    for the publisher's heartbeat, 20 s here; or (the pattern) `PublishingSide._held_to_new_patterns`
    return at once: they wait for the registration, which the test holds back."""
    with Client(ring.nodes[0].endpoint, heartbeat=20.0) as pub, Client(ring.nodes[1].endpoint, heartbeat=HB) as sub:
        other = sub.subscribe(warm)
        pub.publish(warm, "warm")  # connects the subscriber to the publisher
        assert (m := other.get(timeout=20)) is not None and m.text == "warm"
        hold = threading.Event()
        pub.registrar.call(lambda: hold.wait(30))
        try:
            pub.publish(topic, "first")
            pub.publish(topic, "second")
            late = sub.subscribe(subscribed)  # its filter reaches the publisher, which holds the topic
            got = [late.get(timeout=2), late.get(timeout=2)]
            assert topic in pub.publisher.publishing.held, "still registering: no answer was waited for"
        finally:
            hold.set()
        assert [(m.topic, m.seq, m.text) for m in got if m is not None] == [(topic, 1, "first"), (topic, 2, "second")]


def test_a_topic_whose_announcement_lapses_and_comes_back_delivers_nothing_twice(ring):
    """A topic's announcement can vanish from its prefix record for a moment (a record read whole while
    it changes, a busy owner) and come back. Back within a lease's grace, the pattern never stopped
    following it: the same topic state goes on. Gone longer, the pattern stops following it, and when
    it comes back a reliable pattern goes on from where it was, never from seq 1 again (CI saw a
    topic's 20 messages delivered 29 and 24 times).

    To see it fail, make `IoLoop.leave_later` detach at once (no grace: the topic state is replaced),
    or `IoLoop.attach` forget the positions (`was` not applied: seq 1 again), or
    `PatternFollower.followed_again` count nothing."""
    via = ring.nodes[0].endpoint
    with Client(via, heartbeat=HB) as pub, Client(via, heartbeat=HB) as sub:
        pub.advertise("lapse/a", reliable=True)
        pat = sub.subscribe("lapse/>", reliable=True)
        got: list = []

        def publish(seqs: range) -> None:
            for n in seqs:
                pub.publish("lapse/a", f"m{n}")
            drain(pat, got, seqs.stop)

        publish(range(0, 5))
        follower, index = pat.pattern, sub.patterns.indexes[pat.pattern_record]

        def on_registrar(fn) -> None:  # noqa: ANN001
            done = threading.Event()
            sub.registrar.call(lambda: (fn(), done.set()))
            assert done.wait(10)

        lapsed = type(index)()  # what a lapsed announcement leaves: no entry
        before = sub.io.topics["lapse/a"]
        on_registrar(lambda: (follower.refresh({"lapse/a"}, lapsed), follower.refresh({"lapse/a"}, index)))
        publish(range(5, 8))
        assert sub.io.topics["lapse/a"] is before, "back within the grace: it never stopped"
        assert follower.returned == 0, "back within the grace: not counted as left and followed again"
        on_registrar(lambda: follower.refresh({"lapse/a"}, lapsed))
        wait_for(lambda: "lapse/a" not in sub.io.topics, 10, what="the topic left after its grace")
        on_registrar(lambda: follower.refresh({"lapse/a"}, index))
        wait_for(lambda: "lapse/a" in sub.io.topics, 10, what="the topic followed again")
        assert (follower.returned, list(follower.returned_names)) == (1, ["lapse/a"])  # said where users look
        publish(range(8, 11))
        assert pat.get(timeout=0.5) is None
    assert [m.seq for m in got] == list(range(1, 12)), "each message once, in order"


def test_a_reliable_pattern_sharing_a_topic_holds_back_the_intake_when_its_application_lags(ring, monkeypatch):
    """A topic two subscriptions of one client want is received once and handed to both. When the
    second (here a pattern, `pending_limit=100`) is not read, the client stops taking messages in, as
    it does for the first: what waits for its application stays bounded, and nothing is lost.

    To see it fail, leave the shared subscriptions out of the back-pressure check
    (`_update_reading` counting `handles` only), or check the tails of streams stalled by the
    back-pressure itself (they fetch what the intake held back): the queue grows to every message."""
    monkeypatch.setattr(io_loop, "UNREAD_DEFER_S", 0.0)  # the tails wait for unread messages 20 s at most:
    # here only the back-pressure's own gate keeps them waiting (the test watches 1.8 s)
    via = ring.nodes[0].endpoint
    n, limit = 10_000, 100
    bound = limit + BATCH + COALESCE_MAX  # the intake stops between reads of a batch (of runs)
    with Client(via, heartbeat=HB) as pub, Client(via, heartbeat=HB) as sub:
        pub.advertise("held/x", reliable=True, history=n, retain_messages=n)
        first: list = []
        sub.subscribe("held/x", reliable=True, callback=lambda m: first.append(m.seq))
        lagging = sub.subscribe("held/*", reliable=True, pending_limit=limit)
        pub.publish_many("held/x", [b"m"] * n)
        wait_for(lambda: lagging.pending >= limit, 20, what="the lagging subscription full")
        most = 0
        deadline = time.monotonic() + 6 * HB  # observed over six heartbeats: tail checks would have fetched
        while time.monotonic() < deadline:
            most = max(most, lagging.pending)
        assert most <= bound, f"{most} messages wait for an application that reads none"
        got: list = []
        drain(lagging, got, n)
        wait_for(lambda: len(first) >= n, 20, what="the first subscription's messages")
    assert [m.seq for m in got] == list(range(1, n + 1)) and first == list(range(1, n + 1))


@pytest.mark.parametrize("bad", ["a/>/b", "a*", "x/y>", "a//*", ">", "*/temp"])
def test_a_bad_pattern_is_refused_with_one_line(ring, bad):
    with Client(ring.nodes[0].endpoint, heartbeat=HB) as c, pytest.raises(ValueError) as err:
        c.subscribe(bad)
    assert "\n" not in str(err.value) and bad in str(err.value)


def test_a_topic_with_a_wildcard_level_cannot_be_published(ring):
    with Client(ring.nodes[0].endpoint, heartbeat=HB) as c:
        for topic in ("dev/*/temp", "dev/>", "dev/+"):
            with pytest.raises(ValueError, match="wildcard level"):
                c.publish(topic, b"x")
        assert c.publications == {}


def test_advertise_many_returns_with_every_topics_subscribers_in_place(ring, tmp_path):
    """`advertise_many` sends 200 topics' registrations together and returns, like `advertise`, once the
    subscribers the ring knows of (a pattern's, an exact one's) have their filters at our socket; a
    topic already advertised with other terms, or with a wildcard level, is refused before anything
    is sent.

    To see it fail, do not wait for the topics (`Publisher.advertise_many`'s wait ending at once): it
    returns with their registrations still under way and says it could not register them."""
    topics = [f"many/{i}/t" for i in range(200)]
    with Client(ring.nodes[0].endpoint, heartbeat=HB) as listener, Client(ring.nodes[1].endpoint,
                                                                           heartbeat=HB) as c:
        pattern, seven = listener.subscribe("many/*/t"), listener.subscribe("many/7/t")
        c.advertise_many(topics, reliable=True)
        counts = c.publisher.publishing.in_place_many(topics)
        assert [t for t in topics if counts[t] < 1 + (t == "many/7/t")] == []
        assert all(c.publications[t].reliable for t in topics)
        for t in topics:
            c.publish(t, t)
        got: list = []
        drain(pattern, got, len(topics))
        assert sorted(m.text for m in got) == sorted(topics) and seven.get(timeout=5).text == "many/7/t"
        with pytest.raises(ValueError, match="other terms"):
            c.advertise_many(["many/0/t", "many/new/t"], history=5)
        with pytest.raises(ValueError, match="wildcard level"):
            c.advertise_many(["many/x/t", "many/*/t"])
        assert "many/new/t" not in c.publications and "many/x/t" not in c.publications
        with Client(ring.nodes[2].endpoint, heartbeat=HB, data_dir=tmp_path / "journal") as journaling:
            journaling.advertise_many(["many/j1/t", "many/j2/t"], reliable=True)  # one after another
            assert journaling.publish("many/j1/t", "j") == 1 and journaling.publications["many/j2/t"].reliable
            more: list = []
            drain(pattern, more, 1)
            assert [m.text for m in more] == ["j"]


def test_ten_publisher_processes_of_a_thousand_devices_reach_each_pattern_exactly(ring, procs, tmp_path):
    """The acceptance scale: 10 publisher processes, 1,000 devices each publishing dev/<i>/temp and
    dev/<i>/hum, 20 messages a topic. `dev/*/temp` gets exactly the 20,000 temp messages and no hum,
    `dev/>` all 40,000, the exact `dev/7/temp` its 20; the reliable pattern each topic in order from
    its first message."""
    via = ring.nodes[1].endpoint
    devices, each, processes = 1000, 20, 10
    with Client(via, heartbeat=HB) as client:
        temp = client.subscribe("dev/*/temp", reliable=True)
        everything = client.subscribe("dev/>", reliable=True)
        seven = client.subscribe("dev/7/temp")
        for p in range(processes):
            topics = [f"dev/{i}/{kind}" for i in range(p, devices, processes) for kind in ("temp", "hum")]
            # each publisher stays (its history with it) past the wait: a subscriber slowed by a loaded machine
            # still repairs from it (killed at teardown)
            procs(f"pub{p}", "pub", "--via", ring.nodes[p % 3].endpoint, "--count", str(each), "--rate", "0",
                  "--size", "16", "--reliable", "--linger", "260", *[a for t in topics for a in ("--topic", t)])
        got: dict = {temp: [], everything: [], seven: []}
        want = {temp: devices * each, everything: 2 * devices * each, seven: each}

        def all_in() -> bool:  # drained together: a reliable subscription left full holds back the others
            for sub, into in got.items():
                for _ in range(2000):
                    if (m := sub.get(timeout=0.01)) is None:
                        break
                    into.append(m)
            return all(len(got[s]) >= want[s] for s in got)

        try:
            wait_for(all_in, 200, what="every message to each subscription")  # 18 s idle, 114 s in a loaded suite
        except TimeoutError as exc:  # say where it stopped: how many each got, which topics never came
            heard = {m.topic for m in got[everything]}
            never = sorted({f"dev/{i}/{k}" for i in range(devices) for k in ("temp", "hum")} - heard)
            counts = Counter(m.topic for m in got[everything])
            short = sorted(t for t, n in counts.items() if n < each)
            silent = sorted({int(t.split("/")[1]) % processes for t in never})
            said = {p: (tmp_path / f"pub{p}.log").read_text(errors="replace")[-600:] for p in silent[:2]}
            raise AssertionError(f"{exc}: got {[len(got[s]) for s in (temp, everything, seven)]} of "
                                 f"{[want[s] for s in (temp, everything, seven)]}; {len(never)} topics never heard "
                                 f"{never[:5]}; {len(short)} short {[(t, counts[t]) for t in short[:5]]}; "
                                 f"publishers never heard {silent}, the first ones' logs end {said}") from None
        got_temp, got_all, got_seven = got[temp], got[everything], got[seven]
        assert temp.get(timeout=0.5) is None and everything.get(timeout=0.1) is None
    assert Counter(m.topic for m in got_temp) == Counter({f"dev/{i}/temp": each for i in range(devices)})
    assert Counter(m.topic for m in got_all) == Counter(
        {f"dev/{i}/{k}": each for i in range(devices) for k in ("temp", "hum")})
    assert [m.topic for m in got_seven] == ["dev/7/temp"] * each
    by_topic: dict[str, list[int]] = {}
    for m in got_temp:
        by_topic.setdefault(m.topic, []).append(m.seq)
    assert all(seqs == list(range(1, each + 1)) for seqs in by_topic.values()), "in order from the first"


def test_a_new_topic_after_the_prefix_records_owner_died_still_reaches_the_pattern(ring_factory):
    """The owner of the prefix record `dev/>` is SIGKILLed (replicas 3): its successor holds the copies
    of the pattern's field and of the announcements, the subscriber's and the publisher's renewals
    find the new owner, and a topic that appears after the ring healed reaches the pattern.

    To see it fail, make the registrar keep a dead owner (`Registrar._lost_owner` returning at once):
    the pattern's field stays with the dead node, and it hears of no topic after the kill."""
    ring = ring_factory(stabilize=0.2, replicas=3)
    ring.start(5, timeout=60)
    ring.wait_consistent(60, fingers=True)
    with DhtClient(ring.nodes[0].endpoint) as dht:
        owner = dht.lookup("dev/>").owner.endpoint
    survivor = next(n for n in ring.nodes if n.endpoint != owner).endpoint
    with Client(survivor, heartbeat=HB) as publisher, Client(survivor, heartbeat=HB) as client:
        sub = client.subscribe("dev/*/temp", reliable=True)
        publisher.publish("dev/1/temp", "before")
        got: list = []
        drain(sub, got, 1)
        ring.kill(next(n for n in ring.nodes if n.endpoint == owner))
        ring.wait_consistent(60)
        with Client(survivor, heartbeat=HB) as late:
            late.advertise("dev/2/temp", reliable=True)
            for n in range(5):
                late.publish("dev/2/temp", f"after{n}")
            drain(sub, got, 6, timeout=30)
    assert [m.text for m in got if m.topic == "dev/2/temp"] == [f"after{n}" for n in range(5)]


def test_a_group_over_a_pattern_shares_every_topics_messages_and_survives_a_killed_member(ring, worker_processes):
    """3 members of group `w` subscribed to `jobs/>` share 3,000 messages over 30 topics; one member is
    SIGKILLed mid-stream: every message is taken by a member, none goes to two live members, and what
    the dead one held comes again flagged.

    To see it fail, make a member join no topic it hears of (`join` in `join_pattern_group` returning at
    once): the members never join, and the wait for them ends the test."""
    via = ring.nodes[2].endpoint
    # the victim's death is seen by its connection's end, at once; the members' leases (three heartbeats) are
    # a live member's: at 0.3 s, one renewed late on a loaded machine was taken for dead and its messages
    # went to the other member too (a clean-clone run: seqs 96-97 of most topics, to both survivors)
    victim, victim_out = worker_processes("victim", via, "jobs/>", "w", delay=0.01, prefetch=20, heartbeat=BULK_HB)
    _, a_out = worker_processes("a", via, "jobs/>", "w", delay=0.002, heartbeat=BULK_HB)
    _, b_out = worker_processes("b", via, "jobs/>", "w", delay=0.002, heartbeat=BULK_HB)
    topics, per_topic = 30, 100
    outs = (victim_out, a_out, b_out)
    names = [f"jobs/{t % 3}/{t}" for t in range(topics)]
    with Client(via, heartbeat=HB) as publisher:
        for name in names:
            publisher.advertise(name)

        def joined() -> bool:  # each member has heard of each topic and joined its group at this publisher
            with publisher.publishing.lock:
                return all((g := publisher.publishing.groups.get(name, "w")) is not None and len(g.members) == 3
                           for name in names)

        wait_for(joined, 60, what="the three members joined on every topic")
        for n in range(per_topic):
            for t in range(topics):
                publisher.publish(f"jobs/{t % 3}/{t}", f"{t}:{n}")
            if n == per_topic // 2:
                wait_for(lambda: len(jsonl(victim_out)) >= 20, 30, what="the victim at work")
                victim.send_signal(signal.SIGKILL)
                victim.wait(10)

        def seen() -> set[tuple[str, int]]:
            return {(r["topic"], r["seq"]) for f in outs for r in jsonl(f)}

        everything = {(f"jobs/{t % 3}/{t}", s) for t in range(topics) for s in range(1, per_topic + 1)}
        wait_for(lambda: seen() >= everything, 60, what=f"all {len(everything)} taken by a member")
    records = sorted((r for f in outs for r in jsonl(f)), key=lambda r: r["t"])
    first: set = set()
    unflagged = []
    for r in records:
        if (r["topic"], r["seq"]) in first and not r["redelivered"]:
            unflagged.append((r["topic"], r["seq"]))
        first.add((r["topic"], r["seq"]))
    assert not unflagged, f"delivered again without the redelivered flag: {unflagged[:10]}"
    survivors = Counter((r["topic"], r["seq"]) for f in (a_out, b_out) for r in jsonl(f))
    assert not [k for k, n in survivors.items() if n > 1], "a message went to more than one live member"
    assert {r["topic"] for r in jsonl(a_out)} & {r["topic"] for r in jsonl(b_out)}, "members share topics"


def test_a_durable_pattern_resumes_each_topic_and_picks_up_the_ones_that_appeared_while_it_was_away(ring, tmp_path):
    """A durable pattern subscription takes part of two topics and closes; while it is away its
    publisher goes on and starts a third topic; restarted from its data directory under the same
    name, it gets exactly what it had not committed of the first two and the third from its first
    message.

    To see it fail, make a pattern's per-topic positions start from nothing (`Positions` with
    `claim=False` reading {}): the first two topics come again from their first message."""
    via = ring.nodes[0].endpoint
    data = tmp_path / "acct-sub"
    with Client(via, heartbeat=HB) as publisher:
        for t in ("acct/1", "acct/2"):
            publisher.advertise(t, reliable=True)
        with Client(via, heartbeat=HB, data_dir=data) as first:
            sub = first.subscribe("acct/*", durable="ledger")
            for i in range(10):
                publisher.publish("acct/1", f"1:{i}")
                publisher.publish("acct/2", f"2:{i}")
            taken: list = []
            drain(sub, taken, 20)
            assert sub.get(timeout=0.2) is None  # commits the last one taken
        for i in range(10, 15):
            publisher.publish("acct/1", f"1:{i}")
        publisher.advertise("acct/3", reliable=True)
        for i in range(5):
            publisher.publish("acct/3", f"3:{i}")
        with Client(via, heartbeat=HB, data_dir=data) as again:
            sub = again.subscribe("acct/*", durable="ledger")
            rest: list = []
            drain(sub, rest, 10)
            assert sub.get(timeout=0.5) is None, "nothing committed comes again"
    assert sorted(m.text for m in taken) == sorted([f"1:{i}" for i in range(10)] + [f"2:{i}" for i in range(10)])
    assert [m.text for m in rest if m.topic == "acct/1"] == [f"1:{i}" for i in range(10, 15)]
    assert [m.text for m in rest if m.topic == "acct/3"] == [f"3:{i}" for i in range(5)]
    assert not [m for m in rest if m.topic == "acct/2"]


def test_thousands_of_new_topics_at_one_node_are_placed_and_renewed_past_one_requests_bound(ring_factory):
    """2,000 new topics at a one-node ring: 6,000 fields (each topic, and its announcement at two prefix
    records), more than one `records` request carries (4,096 items): placed and renewed in parts, a
    pattern subscriber that comes three leases later still finds every topic, and each topic's first
    message reached the reliable pattern that waited for it, or (the publisher is best effort and keeps
    no history: on a machine loaded past keeping up some are lost) is a dead letter there.

    The late pattern reads the prefix record's 2,000 announcements in pages (dht/records.py).

    To see it fail, take a paged read's first page for the whole (`Registrar._paged` returning False):
    the late pattern finds 1,000 topics."""
    ring = ring_factory(stabilize=0.2)
    ring.start(1, timeout=60)
    via = ring.nodes[0].endpoint
    topics = [f"bulk/{i % 50}/{i}" for i in range(2000)]
    lost: list = []
    # the clients keep the default heartbeat: 6,000 fields renewed every HB at one node, on a machine
    # slower than this suite's usual, lapsed faster than they were renewed (the late pattern found none)
    with Client(via, heartbeat=BULK_HB) as publisher, \
            Client(via, heartbeat=BULK_HB, on_dead_letter=lost.append) as early:
        first = early.subscribe("bulk/>", reliable=True)
        for t in topics:
            publisher.publish(t, t)
        got: list = []
        wait_for(lambda: drained(first, got) + len({d.topic for d in lost}) >= len(topics), 60,
                 what="every topic's message delivered or dead-lettered")
        delivered = sorted(m.text for m in got)
        print(f"{len(delivered)} of {len(topics)} first messages delivered, {len(lost)} dead letters")
        assert len(set(delivered)) == len(delivered)
        assert set(delivered) | {d.topic for d in lost} == set(topics)  # none lost unrecorded
        lease = 3 * BULK_HB
        wait_for(lambda: publisher.registrar.renewals >= 4, 10 * lease, what="renewals past three leases")
        with Client(via, heartbeat=BULK_HB) as late:
            sub = late.subscribe("bulk/*/*")
            try:  # (a lease that lapsed under load is placed again within a heartbeat)
                wait_for(lambda: len(sub.pattern.topics) == len(topics), 10 * lease, what="every topic")
            except TimeoutError as exc:
                found = len(sub.pattern.topics)
                raise AssertionError(f"the late pattern finds {found} of {len(topics)} topics") from exc


def test_subscribe_many_follows_thousands_of_exact_topics_and_sub_takes_a_topics_file(ring, tmp_path):
    """`subscribe_many` places 2,000 exact subscriptions together and returns once each is in place:
    the first message of each new topic reaches it. `sub --topics-file` does the same from a file.

    To see it fail, leave the collector paused after the topics are made. (Returning before the
    registrations are answered passes here 1 run in 3: `topic_info` is asked on the thread that sent
    them, so the owner answers them first. test_policy's refused `subscribe_many` catches it.)"""
    via = ring.nodes[1].endpoint
    topics = [f"many/{i}" for i in range(2000)]
    # the publisher waits for a new topic's filters three heartbeats (3 s at least): at 2 s, 6 s, which a
    # subscriber on a machine loaded by the suite's other workers still meets (CI run 32 lost 14 of 2000
    # first messages to the 3 s of HB). The subscriber keeps BULK_HB: 2,000 fields renewed
    # every HB lapsed at their owners on a loaded machine (a lease of 0.9 s), and a publisher registering
    # in the gap found no subscriber to wait for (a CI run lost 235 first messages so)
    with Client(via, heartbeat=BULK_HB) as sub, Client(via, heartbeat=2.0) as pub:
        subs = sub.subscribe_many(topics)
        assert gc.isenabled(), "the garbage collector, paused while they were made, runs again"
        assert [s.topic for s in subs] == topics
        assert sub.topic_info(topics[-1])["subscribers"] == 1, "in place when subscribe_many returns"
        for t in topics:
            pub.publish(t, t)
        got: list = []

        def all_in() -> bool:
            for s in subs:
                while (m := s.get(timeout=0)) is not None:
                    got.append(m.text)
            return len(got) >= len(topics)

        try:
            wait_for(all_in, 120, what="the first message of each topic")  # (4-6 s here; 60 s ran out in a
        except TimeoutError as exc:  # suite run where every test took 2-3 times as long: slow, not lost)
            raise AssertionError(f"{len(got)} of {len(topics)} first messages") from exc
        assert sorted(got) == sorted(topics)
        with pytest.raises(ValueError, match="given twice"):
            sub.subscribe_many(["x/1", "x/1"])
    listed = tmp_path / "topics.txt"
    listed.write_text("# rooms\n" + "\n".join(f"room/{i}" for i in range(300)) + "\n\n")
    proc = subprocess.Popen([sys.executable, "-m", "chordpub", "sub", "--via", via, "--topics-file", str(listed),
                             "--count", "300", "--seconds", "60", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        with Client(via, heartbeat=HB) as pub:
            wait_for(lambda: pub.topic_info("room/299")["subscribers"] == 1, 30, what="the file's subscriber")
            for i in range(300):
                pub.publish(f"room/{i}", "x")
            out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out)["received"] == 300


def why_missing(client: Client, got: set[str], letters: list, first_read: set[str], prefix: str, n: int) -> str:
    """What the subscriber knows of the topics whose message did not come (said when the test fails)."""
    kinds = Counter((d.from_seq, d.to_seq, d.reason) for d in letters).most_common(4)
    states: list = []
    missing = sorted(set(list(client.io.topics)) - got)  # (read beside the io loop: a glance, not a contract)
    for topic in missing[:4]:
        ts = client.io.topics[topic]
        states.append({topic: [{k: getattr(st, k) for k in ("expected", "live_high", "fetching", "catching_up",
                                                             "unretained_to", "tail_beats", "probing", "confirmed")}
                               | {"buffer": sorted(st.buffer)} for st in ts.streams.values()]
                       + [f"departed {len(ts.departed)}, strangers {len(ts.strangers)}, unmatched {ts.unmatched}, "
                          f"in the first read {topic in first_read}"]})
    return (f"{len(letters)} dead letters {kinds}; {len(missing)} topics followed without one "
            f"({len(set(missing) - first_read)} of them met after the first read): {states}; "
            f"{unaccounted(client, got, letters, prefix, n)}")


def unaccounted(client: Client, got: set[str], letters: list, prefix: str, n: int) -> str:
    """Where the subscriber lost the topics that brought neither a message nor a dead letter: its pattern's
    prefix record (the announcements it holds, its epoch against the owner's), its follower, its io loop."""
    out = []
    lettered = {d.topic for d in letters}
    sub = next(s for s in client._subscriptions.values() if s.pattern is not None)
    record = sub.pattern_record
    index = client.patterns.indexes.get(record)
    reg = client.registrar.watching.get(record)
    owner_epoch = None
    if reg is not None and reg.owner is not None:
        dht = DhtClient(client.via)
        try:
            reply = dht.records_at(reg.owner, [{"k": record, "epoch": reg.namespace}], timeout=5)
            owner_epoch = reply.results[0].get("epoch")
        except Exception as exc:  # noqa: BLE001 - a diagnosis says what it could not learn
            owner_epoch = repr(exc)
        finally:
            dht.close()
    lost = [t for t in (f"{prefix}{i}" for i in range(n)) if t not in got and t not in lettered]
    for topic in lost[:4]:
        ts = client.io.topics.get(topic)
        keys = ("expected", "live_high", "unretained_to", "tail_beats", "fetching", "confirmed", "probe_last")
        streams = [{k: getattr(st, k) for k in keys} for st in ts.streams.values()] if ts else None
        out.append({topic: {"streams": streams, "announced": bool(index and topic in index.by_topic),
                            "followed": topic in sub.pattern.topics, "in io": topic in client.io.topics,
                            "leaving": (topic, id(sub)) in client.io._leaving,
                            "resume at": topic in client.io._resume_at}})
    return (f"{len(lost)} topics with neither a message nor a dead letter: {out}; the prefix "
            f"record's view: {len(index.by_topic) if index else None} topics at epoch "
            f"{reg.epoch if reg else None} (catch_up {reg.catch_up if reg else None}, need_read "
            f"{reg.need_read if reg else None}), the owner's epoch {owner_epoch}")


def rss_kib() -> int:
    return int(next(line.split()[1] for line in open(f"/proc/{os.getpid()}/status") if line.startswith("VmRSS")))


def test_a_pattern_of_thousands_of_topics_holds_bounded_state_that_shrinks_when_they_go(ring, tmp_path, monkeypatch):
    """A pattern subscriber matching 10,000 topics of four publishing Clients (one process) follows each
    with one per-topic state (RSS reported); the publisher is SIGKILLed, its announcements lapse with
    their leases, and the subscriber's state goes with them.

    To see it fail, keep a topic whose announcements are gone (`PatternFollower.refresh` never
    detaching): the 10,000 states stay; or keep the confirmations `subscribe` waited for
    (`FirstTopics.close` keeping its list): 10,000 futures stay."""
    via = ring.nodes[2].endpoint
    n, clients = 10_000, 4
    files = {k: tmp_path / k for k in ("ready", "go", "done")}
    started = time.monotonic()
    proc = start_command(["--via", via, "--clients", str(clients), "--topics", str(n // clients),
                          "--prefix", "mem/", "--heartbeat", "2.0", "--lazy", "--announce",
                          # 10,000 registrations and their renewals beside a loaded suite: announcements that
                          # lapsed at a busy owner (a lease of 3 s) were missing from the pattern's first read
                          "--timeout", "60", *[a for k, f in files.items() for a in (f"--{k}", str(f))]],
                         os.devnull, tmp_path / "pub.log", module="tests.helpers.publishers")
    try:
        letters: list = []
        with Client(via, heartbeat=BULK_HB, on_dead_letter=letters.append) as client:
            before = rss_kib()
            wait_for(lambda: files["ready"].exists() or proc.poll() is not None, 120,
                     what="the publishers' topics registered")
            if proc.poll() is not None:
                said = (tmp_path / "pub.log").read_text(errors="replace")[-800:]
                raise AssertionError(f"the publishers exited ({proc.returncode}) before their topics were in place: "
                                     f"{said}")
            print(f"{n} topics registered {time.monotonic() - started:.1f}s after the publisher started")
            # the follower names only its latest RETURNED_NAMES topics followed again; a loaded owner can let
            # more lapse than that, even while `subscribe` waits (CI: 613 dead letters unexplained by the names
            # kept), so every one is noted from the start
            returned: set[str] = set()
            follow_again = PatternFollower.followed_again

            def noted(follower: PatternFollower, topic: str) -> None:
                returned.add(topic)
                follow_again(follower, topic)

            monkeypatch.setattr(PatternFollower, "followed_again", noted)
            t0 = time.monotonic()
            sub = client.subscribe("mem/*", reliable=True, timeout=120)  # every topic read and followed
            print(f"a pattern subscribed to {n} existing topics in {time.monotonic() - t0:.1f}s")
            first_read = set(sub.pattern.first_read.result())  # the topics announced when it was placed
            files["go"].write_text("1")
            got: set[str] = set()

            def all_in() -> bool:  # (a dead letter accounts for its topic: which ones may have one is below)
                while (m := sub.get(timeout=0.01)) is not None:
                    got.add(m.topic)
                return len(got | {d.topic for d in letters}) >= n

            try:
                wait_for(all_in, 60, what=f"one message on each of {n} topics")
            except TimeoutError as exc:
                said = (tmp_path / "pub.log").read_text(errors="replace")[-800:]
                why = why_missing(client, got, letters, first_read, "mem/", n)
                raise AssertionError(f"{len(got)} of {n} messages; {why}; the publishers' log ends {said!r}") from exc
            # a topic whose announcements lapsed at a loaded owner is left and followed again, or is missing from
            # the pattern's first read and met later: a message sent meanwhile is lost (plain publishers retain
            # nothing), and must be a dead letter then
            unexplained = [d for d in letters if d.topic not in returned and d.topic in first_read]
            assert not unexplained, (f"{len(unexplained)} dead letters on topics followed throughout "
                                     f"(the first messages were sent before we came; {sub.pattern.returned} "
                                     f"topics were left and followed again): {unexplained[:3]}")
            print(f"{sub.pattern.returned} topics left and followed again, {n - len(first_read)} met after the "
                  f"first read; {len(letters)} dead letters on them")
            # (announcements that lapsed at a loaded owner are left and placed again by their publisher's next
            # renewal: the pattern follows all of them once those are back)
            wait_for(lambda: len(sub.pattern.topics) == n and len(client.io.topics) == n, 30,
                     what=f"all {n} topics followed")
            held = rss_kib()
            assert (held - before) / n <= KIB_PER_FOLLOWED_TOPIC, f"{(held - before) / n:.1f} KiB a topic"
            proc.kill()
            proc.wait(10)
            killed = time.monotonic()
            wait_for(lambda: not client.io.topics and not sub.pattern.topics, 60,
                     what="the topics' state gone with their leases")
            print(f"their state gone {time.monotonic() - killed:.1f}s after the publisher was killed")
            futures = sum(1 for o in gc.get_objects() if type(o) is Future)
            assert futures < n // 10, f"{futures} confirmations kept for topics nobody waits for any more"
            print(f"pattern memory: {n} topics cost {(held - before) / n:.1f} KiB each in RSS; "
                  f"{len(client.io.topics)} topic states left after the publisher's leases lapsed")
    finally:
        proc.kill()
        proc.wait(10)


def test_a_group_pattern_is_owed_a_new_topics_messages_before_its_members_join_it(ring):
    """A publisher's first messages on a brand-new topic wait for the consumer groups whose patterns
    match it (their prefix record names them), so members that join the topic a moment later still
    take every message.

    To see it fail, make publishers blind to the groups of the prefix records (`pattern_groups`
    returning {}): the messages sent before the members joined go to nobody."""
    via = ring.nodes[0].endpoint
    done: list[str] = []
    with Client(via, heartbeat=HB) as m1, Client(via, heartbeat=HB) as m2, Client(via, heartbeat=HB) as pub:
        released = threading.Event()  # the members join the topic only once its messages went out
        for m in (m1, m2):
            m.subscribe("tasks/>", group="crew", callback=lambda msg: done.append(msg.text))
            join = m.io.members.attach

            def late(*args, join=join, **kwargs):  # noqa: ANN002, ANN003, ANN202
                released.wait(20)
                return join(*args, **kwargs)

            m.io.members.attach = late
        for i in range(50):
            pub.publish("tasks/new/1", f"t{i}")
        wait_for(lambda: settled(pub, "tasks/new/1") and "tasks/new/1" not in pub.publisher.publishing.held, 20,
                 what="the topic registered and its messages sent")
        released.set()
        wait_for(lambda: len(done) >= 50, 20, what="every task taken by a member")
    assert sorted(done) == sorted(f"t{i}" for i in range(50))
