"""`ring check`: walk the ring by successor pointers and compare it with the ideal ring.

The walk (network) and the verdict (pure) are separate: `evaluate` takes the infos the walk
gathered, computes the ideal ring from their ids (every finger i of node n should be
successor(n + 2**i), SIGCOMM'01 Table 1; under proximity neighbour selection with K samples, one of
the first K nodes of [n + 2**i, n + 2**(i+1)), or that successor when the interval is empty) and
lists every disagreement.
"""

from __future__ import annotations

import bisect

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
        "members": [{"endpoint": i["endpoint"], "id": i["id"], "bind": i.get("bind", i["endpoint"])} for i in infos],
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


def check_ring(client: DhtClient, start: str | None = None, expected: int | None = None,
               step_over: bool = True) -> dict:
    start = start or client.via
    infos, problems = walk(client, start, step_over=step_over)
    return evaluate(infos, problems, int(infos[0].get("bits") or 64), expected)
