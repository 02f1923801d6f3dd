"""The keys' linearizability, judged by the checker the Mininet consensus test uses (tests/helpers/
linearizable.py), on a group of three Raft members (dht/raft.py) each applying what it commits to its
own keys (dht/kv_machine.py), over the network loop of tests/unit/test_raft.py. Reads through the log
pass the checker with a member cut off; the deliberately broken variant, a read served from any
member's applied keys without the log, is caught as soon as the member the majority left behind
serves one: it returns the value a completed write replaced.

To see it fail: let the checker ignore real time (tests/helpers/linearizable.py's search not stopping
at an operation invoked after another returned): the broken variant's stale read passes."""

from __future__ import annotations

from dht.kv_machine import KvMachine, encode
from tests.helpers.linearizable import Op, linearizable
from tests.unit.test_raft import Cluster

KEY = "k"


class Group:
    """Three members, each with its keys; clients' operations timed in the loop's ticks."""

    def __init__(self, seed: int) -> None:
        self.cluster = Cluster(3, seed)
        self.keys = {i: KvMachine() for i in self.cluster.ids}
        self.answers: dict[int, dict | None] = {}  # log index -> the answer of the command there
        self.history: list[Op] = []

    def tick(self) -> None:
        self.cluster.tick()
        for member, applied in self.cluster.applied.items():
            machine = self.keys[member]
            for entry in applied[machine.applied:]:
                self.answers.setdefault(entry.index, machine.apply(entry.index, entry.data))

    def through_log(self, cmd: dict) -> dict:
        """Propose `cmd` at the leader and wait for its answer from the log."""
        call = self.cluster.now
        leader = self.cluster.leader()
        index = leader.propose(encode(cmd))
        while self.keys[leader.id].applied < index:
            self.tick()
        answer = self.answers[index]
        if cmd["op"] == "put":
            self.history.append(Op(KEY, "put", cmd["value"], output=("ok", answer["version"]), call=call,
                                   ret=self.cluster.now))
        else:
            self.history.append(Op(KEY, "get", output=(answer["value"], answer["version"]), call=call,
                                   ret=self.cluster.now))
        return answer

    def read_anywhere(self, member: str) -> None:
        """The broken variant: `member`'s applied keys, read without the log."""
        held = self.keys[member].keys.get(KEY)
        now = self.cluster.now
        self.history.append(Op(KEY, "get", output=(held.value if held else None, held.version if held else 0),
                               call=now, ret=now))


def cut_off_follower(seed: int) -> tuple[Group, str]:
    """A group whose leader wrote `a` to every member, then `b` with the majority only."""
    group = Group(seed)
    group.cluster.await_leader()
    for _ in range(30):
        group.tick()
    leader = group.cluster.leader()
    behind = next(m for m in group.cluster.ids if m != leader.id)
    group.through_log({"op": "put", "key": KEY, "value": b"a"})
    for _ in range(5):  # `a` reaches every member
        group.tick()
    group.cluster.split({m for m in group.cluster.ids if m != behind}, {behind})
    group.through_log({"op": "put", "key": KEY, "value": b"b"})
    return group, behind


def test_reads_through_the_log_are_linearizable_with_a_member_cut_off():
    for seed in range(3):
        group, _behind = cut_off_follower(seed)
        assert group.through_log({"op": "get", "key": KEY})["value"] == b"b"
        assert linearizable(group.history)


def test_a_read_served_by_any_member_without_the_log_is_caught():
    for seed in range(3):
        group, behind = cut_off_follower(seed)
        group.tick()
        group.read_anywhere(behind)  # a tick after `b` returned: it still holds `a`
        assert group.history[-1].output[0] == b"a"
        assert not linearizable(group.history), "a read of the value a completed write replaced"
