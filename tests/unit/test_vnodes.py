"""Virtual nodes, the pure parts: position endpoints and ids, the wire's `at`, where copies go, and the
figures summed per process (`ring load`, `ring watch`, `ring check`) and predicted by the simulator."""

from __future__ import annotations

import pytest

from dht import wire
from dht.host import ChordHost
from dht.ids import MAX_VNODES, key_id, node_id, position_endpoint, position_id, position_of, process_of
from dht.load import by_process, report
from dht.node_config import NodeConfig
from dht.replication import replica_targets
from dht.ringcheck import evaluate
from dht.ringview import Row
from dht.ringview import by_process as watch_by_process
from dht.routing import Peer
from sim.load import keys_per_process


def test_position_zero_is_the_process_itself_and_the_others_hash_their_own_endpoint():
    assert position_endpoint("10.0.0.1:5555", 0) == "10.0.0.1:5555"
    assert position_endpoint("10.0.0.1:5555", 7) == "10.0.0.1:5555/7"
    assert position_id("127.0.0.1:5555", 0) == node_id("127.0.0.1", 5555) == 9165302755413106721
    assert position_id("127.0.0.1:5555", 3) == key_id("127.0.0.1:5555/3")
    for endpoint, process, index in (("h:1", "h:1", 0), ("h:1/12", "h:1", 12), ("a.b-c:65535/255", "a.b-c:65535", 255)):
        assert (process_of(endpoint), position_of(endpoint)) == (process, index)


@pytest.mark.parametrize("text", ["h:1/0", "h:1/256", "h:1/01", "h:1/", "h:1/x", "h:1/2/3", "h/2:1"])
def test_malformed_position_endpoints_are_refused(text):
    with pytest.raises(wire.WireError):
        wire.parse_endpoint(text)


def test_a_position_parses_to_its_process_and_services_take_only_processes():
    assert wire.parse_endpoint("127.0.0.1:5555/9") == ("127.0.0.1", 5555)
    assert wire.zmq_address("127.0.0.1:5555/9") == "tcp://127.0.0.1:5555"
    assert wire.plain_endpoint("127.0.0.1:5555") == "127.0.0.1:5555"
    with pytest.raises(wire.WireError):
        wire.plain_endpoint("127.0.0.1:5555/9")


def test_every_op_may_name_a_position_and_only_a_real_index():
    for op in wire.SCHEMAS:
        assert wire.decode_request(wire.encode_request(op, 1, at=5), {op: {"at": wire.SCHEMAS[op]["at"]}})["at"] == 5
    for bad in (0, MAX_VNODES, -1, True, "1", 1.0):
        with pytest.raises(wire.WireError):
            wire.decode_request(wire.encode_request("ping", 1, at=bad))


def test_a_host_answers_each_position_as_itself_and_refuses_one_it_does_not_hold():
    host = ChordHost(NodeConfig(host="127.0.0.1", port=0, bits=16, vnodes=3))
    try:
        ids = []
        for at in (None, 1, 2, 3):
            frames = [b"peer", wire.encode_request("ping", 7, **({} if at is None else {"at": at}))]
            ids.append(wire.decode_reply(host.server.handle_frames(frames)[-1]))
        assert [r["node_id"] for r in ids[:3]] == [p.me.id for p in host.positions]
        assert ids[3]["ok"] is False and "holds 3" in ids[3]["err"]
        assert [p.me.endpoint for p in host.positions] == [position_endpoint(host.endpoint, i) for i in range(3)]
        assert [p.me.id for p in host.positions] == [key_id(p.me.endpoint, 16) for p in host.positions]
        assert host.positions[1].bytes_in > 0 and host.positions[1].replies_bytes > 0  # each counts its own
    finally:
        host.close()


def peer(endpoint: str, nid: int) -> Peer:
    return Peer(nid, endpoint)


def test_copies_go_to_the_first_position_of_each_other_process():
    me = peer("a:1/2", 10)
    successors = [peer("a:1/3", 11), peer("b:1", 12), peer("b:1/1", 13), peer("a:1", 14), peer("c:1/4", 15),
                  peer("d:1", 16)]
    assert replica_targets(me, successors, 2) == [successors[1], successors[4]]
    assert replica_targets(me, successors, 9) == [successors[1], successors[4], successors[5]]
    assert replica_targets(me, successors[:1], 2) == []  # only our own positions follow: no copy would survive us
    plain = [peer("b:1", 12), peer("c:1", 13), peer("d:1", 14)]
    assert replica_targets(peer("a:1", 10), plain, 2) == plain[:2]  # one position a process: as before


def sample(endpoint: str, nid: int, keys: int, t: float, records: int = 0) -> dict:
    load = {"time": t, "records": records, "record_items": int(t * 10), "record_writes": 0, "lookup_steps": 0,
            "bytes_in": 0, "bytes_out": 0, "relay_messages": None, "relay_bytes": None, "split_id": None}
    return {"endpoint": endpoint, "id": nid, "keys": keys, "load": load}


def test_load_is_summed_per_process_and_spread_over_processes():
    walk = [("a:1", 1, 10), ("b:1", 2, 30), ("a:1/1", 3, 20), ("b:1/1", 4, 0), ("c:1", 5, 60)]
    out = report([sample(e, i, k, 0.0) for e, i, k in walk], [sample(e, i, k, 1.0) for e, i, k in walk])
    per = {p["process"]: p for p in out["processes"]}
    assert {k: (p["positions"], p["keys"]) for k, p in per.items()} == {"a:1": (2, 30), "b:1": (2, 30),
                                                                         "c:1": (1, 60)}
    assert per["a:1"]["renewals_per_s"] == pytest.approx(20.0)  # 10 a second on each of its two
    assert out["per_process"]["keys"]["max_over_mean"] == pytest.approx(60 / 40)
    assert out["ring"]["keys"]["max_over_mean"] == pytest.approx(60 / 24)
    joined = by_process([{"endpoint": "a:1", "keys": 3, "records": 0} | {k: 0.0 for k in ("registrations_per_s",)},
                         {"endpoint": "a:1/1", "keys": 1, "records": 0, "registrations_per_s": None}])
    assert joined[0]["registrations_per_s"] is None and joined[0]["keys"] == 4  # a position met once: no rate


def test_the_watch_sums_what_each_process_carries_and_leaves_out_the_gone():
    rows = [Row("a:1", 1, "up", 0.25, 10, 1), Row("a:1/1", 2, "up", 0.25, 5, 0), Row("b:1", 3, "up", 0.5, 7, 2),
            Row("c:1/2", 4, "dead")]
    assert watch_by_process(rows) == [{"process": "a:1", "positions": 2, "arc": 0.5, "keys": 15, "records": 1},
                                      {"process": "b:1", "positions": 1, "arc": 0.5, "keys": 7, "records": 2}]


def info(endpoint: str, nid: int, succ: tuple[str, int], pred: tuple[str, int], positions: list[str]) -> dict:
    return {"endpoint": endpoint, "id": nid, "process": process_of(endpoint), "positions": positions,
            "successors": [{"endpoint": succ[0], "id": succ[1]}], "predecessor": {"endpoint": pred[0], "id": pred[1]},
            "fingers": [], "r": 1}


def test_a_check_counts_processes_and_fails_when_a_process_has_a_position_off_the_ring():
    a, b = ["a:1", "a:1/1"], ["b:1"]
    ring = [info("a:1", 10, ("b:1", 20), ("a:1/1", 30), a), info("b:1", 20, ("a:1/1", 30), ("a:1", 10), b),
            info("a:1/1", 30, ("a:1", 10), ("b:1", 20), a)]
    report_ok = evaluate(ring, [], 8)
    assert report_ok["consistent"] and (report_ok["nodes"], report_ok["processes"]) == (3, 2)
    assert [m["process"] for m in report_ok["members"]] == ["a:1", "b:1", "a:1"]
    lonely = [info("a:1", 10, ("b:1", 20), ("b:1", 20), a + ["a:1/2"]), info("b:1", 20, ("a:1", 10), ("a:1", 10), b)]
    assert evaluate(lonely, [], 8)["problems"] == ["a:1/1, a:1/2 of a:1 are not on the ring"]


def test_the_simulator_counts_keys_per_process_on_given_ids():
    ids = [100, 200, 300, 1000]  # a 10-bit circle: process 0 owns (1000, 100] and (200, 300], process 1 the rest
    trials = keys_per_process(ids, [0, 1, 0, 1], 10_000, bits=10, trials=20, seed=1)
    assert trials.shape == (20, 2) and (trials.sum(axis=1) == 10_000).all()
    share = trials[:, 0].mean() / 10_000
    assert share == pytest.approx((124 + 100) / 1024, abs=0.01)


def test_a_position_asks_another_of_its_process_in_place_and_gets_what_the_socket_would_say():
    host = ChordHost(NodeConfig(host="127.0.0.1", port=0, bits=16, vnodes=3))
    try:
        target = host.positions[2].me.endpoint
        local = host.rpc.call(target, "get_links")
        remote = wire.decode_reply(host.server.handle_frames([b"peer", wire.encode_request("get_links", 1, at=2)])[-1])
        assert local.ok and local.body == {**remote, "id": 0}
        assert host.rpc.sent == 0 and host.rpc.local == 1  # no message went out
        assert host.round_trips.get(target) == 0.0  # nothing is nearer than our own process
        refused = host.rpc.call(target, "next_hop", key_id=1 << 20)  # off this 16-bit circle
        assert not refused.ok and "outside" in refused.err
        elsewhere = host.rpc.call("127.0.0.1:1", "ping", timeout=0.05)  # another process: the socket
        assert elsewhere.timed_out and host.rpc.sent == 1
    finally:
        host.close()
