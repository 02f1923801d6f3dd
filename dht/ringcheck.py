"""`ring check`: walk the ring by successor pointers and compare it with the ideal ring.

The walk (network) and the verdict (pure) are separate: `evaluate` takes the infos the walk
gathered, computes the ideal ring from their ids (every finger i of node n should be
successor(n + 2**i), SIGCOMM'01 Table 1; under proximity neighbour selection with K samples, one of
the first K nodes of [n + 2**i, n + 2**(i+1)), or that successor when the interval is empty) and
lists every disagreement.

A ring can also be split in two (or more), each consistent on its own (dht/membership.py). So the check
also asks the nodes it walked which members they remember, and pings those that are off the walk: one
that answers is alive in another ring, and the check fails naming it. `consistent` means one ring.
"""

from __future__ import annotations

import bisect
import time

import zmq

from dht import wire
from dht.client import DhtClient, DhtError
from dht.ids import distance, finger_start, owner_of


def walk(client: DhtClient, start: str, limit: int = 100_000, step_over: bool = True,
         silent: set[str] | None = None, topics: int = 0) -> tuple[list[dict], list[str]]:
    """Infos of the nodes met following successor pointers from `start`, and the problems met.

    A successor that does not answer (a node that died and is not yet healed around) is stepped over
    through the next entries of the successor list, as the nodes themselves will; it is named in the
    problems, so that a ring that is healing reports the nodes it could walk, not a short count.
    With step_over=False (a poll that only asks "consistent yet?") the walk stops at the dead node.
    The endpoints that did not answer are added to `silent`; topics=N asks each node for up to N of
    the topics it owns.
    """
    silent = set() if silent is None else silent
    infos: list[dict] = []
    problems: list[str] = []
    seen: set[str] = set()
    current = start
    while len(infos) < limit:
        try:
            info = client.info(current, topics)
        except DhtError as exc:
            silent.add(current)
            if not infos:
                raise
            if not step_over:
                problems.append(f"{infos[-1]['endpoint']} points to {current}, which does not answer ({exc})")
                return infos, problems
            alive = _next_answering(client, infos[-1], seen, problems, exc, silent, topics)
            if alive is None:
                problems.append(f"the walk stopped at {infos[-1]['endpoint']}: none of its successors answers")
                return infos, problems
            current, info = alive
            if info is None:  # stepping over the dead node closes the loop
                return infos, problems
        infos.append(info)
        seen.add(current)
        if not info["successors"]:
            if len(infos) > 1 or info["predecessor"] is not None:
                problems.append(f"{current} has no successor")
            return infos, problems
        current = info["successors"][0]["endpoint"]
        if current == start:
            return infos, problems
        if current in seen:
            problems.append(f"successor pointers loop back to {current} without returning to {start}")
            return infos, problems
    problems.append(f"walk stopped after {limit} nodes")
    return infos, problems


def _next_answering(client: DhtClient, last: dict, seen: set[str], problems: list[str],
                    first_error: DhtError, silent: set[str], topics: int) -> tuple[str, dict | None] | None:
    """The first of `last`'s successors after the dead one that answers, and its info (None when it is
    a node the walk has already met)."""
    successors = [s["endpoint"] for s in last["successors"]]
    problems.append(f"{last['endpoint']} points to {successors[0]}, which does not answer ({first_error})")
    for endpoint in successors[1:]:
        if endpoint in seen:
            return endpoint, None
        try:
            info = client.info(endpoint, topics)
        except DhtError:
            silent.add(endpoint)
            problems.append(f"{endpoint} (a later successor of {last['endpoint']}) does not answer either")
            continue
        return _back_to_nearest(client, last, endpoint, info, seen, topics)
    return None


def _back_to_nearest(client: DhtClient, last: dict, endpoint: str, info: dict,
                     seen: set[str], topics: int) -> tuple[str, dict]:
    """A stale successor list may skip live nodes: follow predecessor pointers back while they stay
    between `last` and the node reached, so that the walk misses none of them."""
    bits = int(last.get("bits") or 64)
    for _ in range(64):
        pred = info["predecessor"]
        if pred is None or pred["endpoint"] in seen or not 0 < distance(last["id"], pred["id"], bits) < distance(
                last["id"], info["id"], bits):
            break
        try:
            endpoint, info = pred["endpoint"], client.info(pred["endpoint"], topics)
        except DhtError:
            break
    return endpoint, info


def evaluate(infos: list[dict], problems: list[str], bits: int, expected: int | None = None) -> dict:
    """The report of `ring check`: consistent iff successors and predecessors agree around one loop."""
    problems = list(problems)
    n = len(infos)
    ids = [i["id"] for i in infos]
    sorted_ids = sorted(ids)
    wraps = sum(1 for a, b in zip(ids, ids[1:] + ids[:1], strict=True) if b <= a) if n > 1 else 1
    if wraps != 1:
        problems.append(f"successor pointers go round the circle {wraps} times, not once")
    if expected is not None and n != expected:
        problems.append(f"found {n} nodes on the ring, expected {expected}")
    walked = {i["endpoint"] for i in infos}
    processes: dict[str, list[str]] = {}
    for info in infos:
        processes.setdefault(info.get("process", info["endpoint"]), info.get("positions") or [info["endpoint"]])
    for process, positions in processes.items():
        missing = [p for p in positions if p not in walked]
        if missing:
            problems.append(f"{', '.join(missing)} of {process} {'is' if len(missing) == 1 else 'are'} "
                            "not on the ring")
    succ_ok = succ_total = finger_ok = finger_total = 0
    for idx, info in enumerate(infos):
        nxt = infos[(idx + 1) % n]
        pred = nxt["predecessor"]
        if n > 1 and (pred is None or pred["id"] != info["id"]):
            got = "none" if pred is None else pred["endpoint"]
            problems.append(f"predecessor of {nxt['endpoint']} is {got}, expected {info['endpoint']}")
        r = info.get("r") or len(info["successors"])
        want = [infos[(idx + j) % n]["id"] for j in range(1, min(r, n - 1) + 1)]
        have = [s["id"] for s in info["successors"][: len(want)]]
        succ_total += max(len(want), 1) if n > 1 else 0
        succ_ok += sum(1 for a, b in zip(want, have, strict=False) if a == b)
        for i, finger in enumerate(info["fingers"]):
            finger_total += 1
            allowed = allowed_fingers(sorted_ids, info["id"], i, bits, info.get("pns") or 0)
            if finger is not None and finger["id"] in allowed:
                finger_ok += 1
            elif finger is None and allowed == [info["id"]]:
                finger_ok += 1  # "points at itself" is what an empty finger means
    return {
        "nodes": n,
        "processes": len(processes),
        "members": [{"endpoint": i["endpoint"], "id": i["id"], "bind": i.get("bind", i["endpoint"]),
                     "process": i.get("process", i["endpoint"])} for i in infos],
        "consistent": not problems,
        "fingers_correct": round(finger_ok / finger_total, 6) if finger_total else 1.0,
        "successors_correct": round(succ_ok / succ_total, 6) if succ_total else 1.0,
        "problems": problems,
    }


def allowed_fingers(sorted_ids: list[int], me: int, i: int, bits: int, pns: int) -> list[int]:
    """The ids finger i of node `me` may hold: successor(me + 2**i), and under PNS with k samples the
    next nodes while they stay in the finger's interval, k in all."""
    first = owner_of(sorted_ids, finger_start(me, i, bits))
    out = [first]
    if pns > 1 and first != me:
        end = 1 << (i + 1)
        at = bisect.bisect_left(sorted_ids, first)
        for step in range(1, pns):
            nxt = sorted_ids[(at + step) % len(sorted_ids)]
            if nxt == me or distance(me, nxt, bits) >= end or distance(me, first, bits) >= end:
                break
            out.append(nxt)
    return out


SPLIT_PROBES = 64  # remembered members off the walk pinged by one check, at most
SPLIT_WAIT = 0.5  # seconds a check waits for them, all at once


def split_problems(client: DhtClient, infos: list[dict], silent: set[str] = frozenset(),
                   wait: float = SPLIT_WAIT) -> list[str]:
    """A problem for each member remembered by a walked node that is off the walk and answers (asked
    all at once, waiting `wait` seconds in all): it is alive, so it is in another ring."""
    walked = {i["endpoint"] for i in infos}
    remembered_by: dict[str, str] = {}
    for info in infos:
        for m in info.get("remembered", []):
            e = m.get("endpoint")
            if isinstance(e, str) and e not in walked and e not in silent:
                remembered_by.setdefault(e, info["endpoint"])
    answers: dict[str, dict] = {}
    rpc = client.rpc
    for endpoint in list(remembered_by)[:SPLIT_PROBES]:
        rpc.send(endpoint, "get_links", on_reply=lambda r, e=endpoint: answers.__setitem__(e, r.body) if r.ok else None,
                 timeout=wait)
    deadline = time.monotonic() + wait
    while rpc.waiting and time.monotonic() < deadline:
        if rpc.socket.poll(max(1, int((deadline - time.monotonic()) * 1000)), zmq.POLLIN):
            rpc.on_readable()
    rpc.expire(deadline + 1.0)  # give up on the rest: their callbacks see a timeout
    problems = []
    for endpoint, body in sorted(answers.items()):
        try:
            succ = wire.decode_peers(body.get("successors", []))
        except wire.WireError:
            succ = []
        where = f"its successor is {succ[0].endpoint}" if succ else "it is alone"
        problems.append(f"{endpoint} (remembered by {remembered_by[endpoint]}) is alive but not in this ring: "
                        f"the ring is split ({where})")
    return problems


def check_ring(client: DhtClient, start: str | None = None, expected: int | None = None,
               step_over: bool = True, split_wait: float = SPLIT_WAIT) -> dict:
    """The report of `ring check`. A poll (step_over=False, asking only "consistent yet?") looks for a
    split only once the walk itself is consistent, so that a healing ring's polls stay quick."""
    start = start or client.via
    silent: set[str] = set()
    infos, problems = walk(client, start, step_over=step_over, silent=silent)
    bits = int(infos[0].get("bits") or 64)
    report = evaluate(infos, problems, bits, expected)
    if step_over or report["consistent"]:
        split = split_problems(client, infos, silent, split_wait)
        if split:
            report = evaluate(infos, problems + split, bits, expected)
    return report
