"""The advertiser's looks at registrations under way (pubsub/advertising.py), driven by hand: no thread,
no socket. The filters a socket holds are a dict here, and their `changes` a counter, as
pubsub/publishing.py's `in_place_since` reports them."""

from __future__ import annotations

from pubsub.advertising import Advertiser, Answer, Registering


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
