"""The advertiser's looks at registrations under way (pubsub/advertising.py), driven by hand: no thread,
no socket. The filters a socket holds are a dict here, and their `changes` a counter, as
pubsub/publishing.py's `in_place_since` reports them."""

from __future__ import annotations

import logging
import threading
import time

import pubsub.advertising as advertising
from pubsub.advertising import BURST_GAP, BURST_HOLD, Advertiser, Answer, Registering


class Socket:
    """What `in_place_since` answers: counts of the topics asked, and whether to ask the known ones."""

    def __init__(self) -> None:
        self.filters: dict[str, int] = {}
        self.changes = 0
        self.counted: list[str] = []  # every topic counted, in order

    def arrive(self, topic: str) -> None:
        self.filters[topic] = self.filters.get(topic, 0) + 1
        self.changes += 1

    def in_place_since(self, fresh: list[str], known: list[str], since: int) -> tuple[dict[str, int], int]:
        topics = fresh if self.changes == since else [*fresh, *known]
        self.counted += topics
        return {t: self.filters.get(t, 0) for t in topics}, self.changes


def registering(topic: str, subscribers: int) -> Registering:
    placed = Answer()
    placed.set_result(subscribers)
    return Registering(topic, "direct", placed, [], deadline=1e18)


def make(socket: Socket) -> tuple[Advertiser, list[str]]:
    done: list[str] = []

    def settle(r: Registering) -> None:
        r.subscribers = r.placed.result()  # type: ignore[assignment]

    return Advertiser(settle, socket.in_place_since, lambda r, err: done.append(r.topic), 60.0), done


def test_a_topic_waits_for_its_subscribers_filter_and_goes_when_it_arrives_after_the_first_count():
    """A topic whose owner named a subscriber waits for its filter; the filter may come after the
    topic was first counted, and then it goes.

    To see it fail, leave the known topics out of the count (`Advertiser._look` passing [] for
    them): the filter that came later is never seen."""
    socket = Socket()
    advertiser, done = make(socket)
    waiting, nobody = registering("a", 1), registering("b", 0)
    pending = [waiting, nobody]
    finished = advertiser._look(pending)
    assert done == ["b"] and finished == {id(nobody)}, "no subscriber known: it goes at once"
    assert advertiser._look([waiting]) == set() and done == ["b"], "its subscriber's filter has not come"
    socket.arrive("a")
    assert advertiser._look([waiting]) == {id(waiting)} and done == ["b", "a"]


def test_topics_counted_before_are_not_counted_again_while_no_filter_comes():
    """A look at a thousand waiting topics counts none of them again while no filter came or went.

    To see it fail, make `Advertiser._look` pass -1 for the filters' changes it saw: every look
    counts them all."""
    socket = Socket()
    advertiser, _done = make(socket)
    pending = [registering(f"t{i}", 1) for i in range(1000)]
    advertiser._look(pending)
    assert len(socket.counted) == 1000
    for _ in range(10):
        advertiser._look(pending)
    assert len(socket.counted) == 1000, "a look with no filter come since counted them all again"
    socket.arrive("t7")
    assert advertiser._look(pending) == {id(pending[7])} and len(socket.counted) == 2000


def wait_until(condition, seconds: float = 10.0) -> bool:
    """Poll `condition` with a deadline: the advertiser's own thread does what is awaited."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def test_a_burst_of_new_topics_begins_its_registrations_once_it_ends_and_a_lone_topic_at_once():
    """A new topic that comes alone is registered at once, on the publishing thread; the topics of a
    burst wait until it ends, then begin on the advertiser's thread, and a burst that never ends
    begins them within BURST_HOLD. A topic of the burst may begin at once only if the machine held
    this thread back BURST_GAP before it (the test's own clock says when). To see it fail, make every
    topic begin at once (`alone = True` in `Advertiser.begin`): the burst's registrations begin while
    it goes on."""
    socket = Socket()
    advertiser, done = make(socket)
    began: dict[str, str] = {}

    def start(topic: str) -> Registering:
        began[topic] = threading.current_thread().name
        return registering(topic, 0)

    def timed_begin(topic: str) -> float:
        """Begin `topic`; when the call began (the advertiser reads its clock within the call)."""
        called = time.monotonic()
        advertiser.begin(topic, lambda t, _: start(t))
        return called

    caller = threading.current_thread().name
    try:
        previous = timed_begin("alone")
        assert began == {"alone": caller}
        at_once = []  # (topic, seconds from the call before it began to this one's end)
        for i in range(20):
            called = timed_begin(f"burst{i}")
            if began.get(f"burst{i}") == caller:
                at_once.append((f"burst{i}", time.monotonic() - previous))
            previous = called
        assert all(spread >= BURST_GAP for _t, spread in at_once), \
            f"a burst's registrations wait for it to end: {at_once} began at once"
        assert wait_until(lambda: len(done) == 21)
        assert {name for t, name in began.items() if t.startswith("burst") and t not in dict(at_once)} == {
            "chordpub-advertiser"}
        # a burst that goes on: its held-back topics begin while it goes on
        advertiser.begin("long0", lambda t, _: start(t))
        first, count = time.monotonic(), 1
        while (not any(t.startswith("long") and name == "chordpub-advertiser" for t, name in began.items())
               and time.monotonic() - first < 10 * BURST_HOLD + 5):
            timed_begin(f"long{count}")
            count += 1
            time.sleep(BURST_GAP / 4)  # new topics closer together than a burst's end
        assert any(t.startswith("long") and name == "chordpub-advertiser" for t, name in began.items()), \
            "the held-back topics of a burst that goes on began while it went on"
    finally:
        advertiser.stop()


def test_held_back_registrations_begin_at_flush_and_end_as_dead_letters_at_stop(monkeypatch):
    """`flush` (the client closing) begins a burst's registrations at once and waits for them; those
    still held back when the advertiser stops are told the client closed. To see it fail, let `flush`
    overlook the held-back ones (`if not self._pending and not self._later and not self._beginning:`
    made `if not self._pending:`): it returns before they began."""
    socket = Socket()
    advertiser, done = make(socket)
    advertiser.begin("gone", lambda t, _: None)  # alone, and no longer published by its turn: nothing under way
    # The burst lasts until flush: a pause of a loaded machine between two begins must not end it.
    monkeypatch.setattr(advertising, "BURST_GAP", 30.0)
    monkeypatch.setattr(advertising, "BURST_HOLD", 30.0)
    for i in range(5):
        advertiser.begin(f"t{i}", lambda t, _: registering(t, 0))
    assert advertiser.flush(5.0) and sorted(done) == ["t0", "t1", "t2", "t3", "t4"]
    told: list[tuple[str, str]] = []
    closing = Advertiser(lambda r: None, socket.in_place_since, lambda r, err: told.append((r.topic, str(err))), 60.0)
    closing.begin("a", lambda t, _: registering(t, 0))
    closing.begin("b", lambda t, _: registering(t, 0))  # held back: the burst has not ended
    closing.stop()
    advertiser.stop()
    assert ("b", "the client closed before the topic was registered") in told


def test_topics_whose_subscribers_did_not_connect_in_time_go_with_one_warning_for_the_look(caplog):
    """A burst's topics whose known subscriber never connected (it left) go once their wait is over, and
    the look that lets them go says so in one line, not one per topic. To see it fail, warn once per late
    topic (`if late:` made `for _late in late:`): a thousand lines for a thousand topics."""
    socket = Socket()
    done: list[str] = []

    def settle(r: Registering) -> None:
        r.subscribers = r.placed.result()  # type: ignore[assignment]

    advertiser = Advertiser(settle, socket.in_place_since, lambda r, err: done.append(r.topic), 0.0)
    pending = [registering(f"t{i}", 1) for i in range(1000)]
    with caplog.at_level(logging.WARNING, logger="pubsub.advertising"):
        finished = advertiser._look(pending)  # settled, and past a wait of no time for the filters
    assert len(finished) == 1000 and len(done) == 1000
    lines = [r.getMessage() for r in caplog.records if "connected in time" in r.getMessage()]
    assert len(lines) == 1 and "(and 999 more topics): 0 of the 1 subscribers" in lines[0], lines[:3]
