"""Consumer groups (work queues): each message of a topic to one live member of each group, by credit,
acknowledged, redelivered when a member fails or dies, key-ordered, prioritised, durable. Real node
processes, real Clients; members that are killed or restarted are processes of their own
(tests/helpers/worker.py).

To see them fail: make `GroupDispatch._most_free` return any member with free credit regardless of
prefetch (`m.free > -1`): a slow member then holds more than its prefetch; make `GroupDispatch.leave`
keep what the member held (nothing taken back): a killed member's messages never go on to another
member, and the test's wait for them times out; make `GroupDispatch.target` ignore
`_pinned`: a key's messages overtake each other when members change.

Long because the groups' acceptance tests share one ring and one set of worker helpers; each
test is short.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from chordpub import Client
from chordpub.launcher import wait_for
from tests.conftest import jsonl, one_error_line, run_cli, start_module_ring
from tests.helpers.prometheus import scrape, value

HB = 0.5
DEFAULT_HB = 1.0  # Client's heartbeat unless told


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "groups-ring", 3)


@pytest.fixture
def workers(worker_processes):
    """start(name, via, topic, group, **options) -> (process, output file), at this module's heartbeat."""
    return lambda *args, **options: worker_processes(*args, **{"heartbeat": HB, **options})


def test_each_message_goes_to_one_member_and_every_plain_subscriber_gets_all(ring):
    via = [n.endpoint for n in ring.nodes]
    got: dict[str, list[tuple[str, int, bool]]] = defaultdict(list)
    plain: list[tuple[str, int]] = []
    lock = threading.Lock()

    def member(name: str):  # noqa: ANN202
        def take(m) -> None:  # noqa: ANN001
            with lock:
                got[name].append((m.publisher, m.seq, m.redelivered))
        return take

    clients = [Client(via[i % 3], heartbeat=HB) for i in range(6)]
    try:
        pubs, members, watcher = clients[:2], clients[2:5], clients[5]
        for p in pubs:
            p.advertise("orders", reliable=True)
        for i, c in enumerate(members):
            c.subscribe("orders", group="billing", callback=member(f"m{i}"))
        watcher.subscribe("orders", reliable=True, callback=lambda m: plain.append((m.publisher, m.seq)))
        for i in range(10_000):
            for p in pubs:
                p.publish("orders", f"order {i}")
        wait_for(lambda: sum(map(len, got.values())) >= 20_000 and len(plain) >= 20_000, 60,
                 what="20,000 messages to the group and to the plain subscriber")
    finally:
        for c in clients:
            c.close()
    everything = {(p.id, s) for p in pubs for s in range(1, 10_001)}
    delivered = [(pub, seq) for taken in got.values() for pub, seq, _ in taken]
    assert len(delivered) == len(set(delivered)) == 20_000 and set(delivered) == everything, "each to one member"
    assert not any(r for taken in got.values() for *_, r in taken), "no failure, so no redelivery"
    assert sorted(plain) == sorted(everything)
    shares = [len(got[f"m{i}"]) for i in range(3)]
    assert max(shares) <= 1.25 * min(shares), shares
    print(f"groups: 20,000 messages from 2 publishers shared {shares} by 3 members; the plain subscriber got all")


def test_a_slow_member_gets_less_never_more_than_its_prefetch_and_the_group_keeps_its_pace(ring):
    """What the members can handle is measured, not assumed: each handler's own time, all of it (a sleep
    runs long on a loaded machine, and so does the handler's own bookkeeping), and the group's rate is
    judged against the sum of 1 / that time: what is left is the time a member waited for work."""
    via = ring.nodes[0].endpoint
    prefetch, total = 20, 1500
    work = {"fast": 0.004, "slow": 0.040}  # seconds of work a message: the slow one is 10x slower
    got: Counter[str] = Counter()
    busy: Counter[str] = Counter()
    most_held: Counter[str] = Counter()
    subs = {}
    done = threading.Event()

    def member(name: str):  # noqa: ANN202
        def take(m) -> None:  # noqa: ANN001
            t0 = time.monotonic()
            most_held[name] = max(most_held[name], subs[name].summary()["held"])
            time.sleep(work[name])  # the work
            most_held[name] = max(most_held[name], subs[name].summary()["held"])  # (its peak: what came meanwhile)
            busy[name] += time.monotonic() - t0
            got[name] += 1
            if sum(got.values()) >= total:
                done.set()
        return take

    with Client(via, heartbeat=HB) as publisher, Client(via, heartbeat=HB) as fast, \
            Client(via, heartbeat=HB) as slow:
        publisher.advertise("jobs")
        for name, c in (("fast", fast), ("slow", slow)):
            subs[name] = c.subscribe("jobs", group="crunch", prefetch=prefetch, callback=member(name))
        t0 = time.monotonic()
        for i in range(total):
            publisher.publish("jobs", str(i))
        assert done.wait(60), got
        took = time.monotonic() - t0
    capacity = sum(got[n] / busy[n] for n in work)  # messages a second each handler took, summed
    rate = total / took
    assert max(most_held.values()) <= prefetch, most_held
    assert 0.05 <= got["slow"] / got["fast"] <= 0.25, got  # about a tenth
    # each got in proportion to its measured speed: both were kept busy about as long
    assert 0.6 <= busy["slow"] / busy["fast"] <= 1.6, (dict(got), dict(busy))
    assert rate >= 0.8 * capacity, f"{rate:.0f} msg/s against {capacity:.0f} the members can handle"
    print(f"groups: fast {got['fast']}, slow {got['slow']} (0.1 expected), {rate:.0f} msg/s of {capacity:.0f} "
          f"({rate / capacity:.2f}); most held {dict(most_held)} (prefetch {prefetch})")


def test_a_member_killed_mid_stream_loses_nothing_and_its_messages_go_on_within_two_heartbeats(ring, workers):
    """At the default heartbeat (1 s): the member's death is seen when its connection closes, not by its
    lease, so the bound is the heartbeat's only in name; alone it takes about 0.3 s, beside a loaded
    suite up to 1.4 s."""
    via = ring.nodes[1].endpoint
    victim, victim_out = workers("victim", via, "tasks", "w", delay=0.01, prefetch=50, heartbeat=DEFAULT_HB)
    _, a_out = workers("a", via, "tasks", "w", delay=0.002, heartbeat=DEFAULT_HB)
    _, b_out = workers("b", via, "tasks", "w", delay=0.002, heartbeat=DEFAULT_HB)
    total = 3000
    with Client(via) as publisher:
        publisher.advertise("tasks")
        for i in range(total // 2):
            publisher.publish("tasks", str(i))
        wait_for(lambda: len(jsonl(victim_out)) >= 20, 30, what="the victim at work")
        victim.send_signal(signal.SIGKILL)
        killed_at = time.time()
        victim.wait(10)
        for i in range(total // 2, total):
            publisher.publish("tasks", str(i))

        def seen() -> set[int]:
            return {r["seq"] for f in (victim_out, a_out, b_out) for r in jsonl(f)}

        wait_for(lambda: seen() >= set(range(1, total + 1)), 60, what=f"all {total} taken by a member")
    records = sorted((r for f in (victim_out, a_out, b_out) for r in jsonl(f)), key=lambda r: r["t"])
    first: set[int] = set()
    unflagged = []
    for r in records:
        if r["seq"] in first and not r["redelivered"]:
            unflagged.append(r["seq"])
        first.add(r["seq"])
    assert not unflagged, f"delivered again without the redelivered flag: {unflagged[:10]}"
    survivors = Counter(r["seq"] for f in (a_out, b_out) for r in jsonl(f))
    twice = sorted(seq for seq, n in survivors.items() if n > 1)
    assert not twice, f"a message went to more than one live member: {twice[:10]}"
    again = [r for r in records if r["redelivered"]]
    assert again and all(r["deliveries"] >= 2 for r in again), "the victim died holding messages: they came again"
    lag = max(min(r["t"] for r in again if r["seq"] == s) for s in {r["seq"] for r in again}) - killed_at
    assert lag <= 2 * DEFAULT_HB, f"the victim's messages went on {lag:.2f}s after its death (ack_wait is 30 s)"
    print(f"groups: {len({r['seq'] for r in again})} messages the killed member held went to the others within "
          f"{lag * 1000:.0f} ms of its death, all flagged; {total} of {total} delivered")


def test_a_rolling_restart_of_every_member_under_load_never_stops_delivery_for_two_heartbeats(ring, workers):
    via = ring.nodes[2].endpoint
    members = [workers(f"r{i}", via, "rolling", "w", delay=0.001) for i in range(3)]
    outs = [out for _, out in members]
    stop = threading.Event()
    sent = [0]
    with Client(via, heartbeat=HB) as publisher:
        publisher.advertise("rolling")

        def load() -> None:
            t0 = time.monotonic()
            while not stop.is_set():
                sent[0] = publisher.publish("rolling", str(sent[0]))
                stop.wait(max(t0 + sent[0] / 300 - time.monotonic(), 0))  # 300 a second

        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        try:
            wait_for(lambda: all(jsonl(o) for o in outs), 30, what="every member at work")
            for i, (proc, _) in enumerate(members):  # each in turn: stopped gracefully, started again
                proc.send_signal(signal.SIGTERM)
                proc.wait(15)
                _, out = workers(f"r{i}-again", via, "rolling", "w", delay=0.001)
                outs.append(out)
                wait_for(lambda o=out: jsonl(o), 30, what=f"member {i} back at work")
        finally:
            stop.set()
            thread.join(10)
        total = sent[0]
        wait_for(lambda: {r["seq"] for o in outs for r in jsonl(o)} >= set(range(1, total + 1)), 60,
                 what=f"all {total} delivered")
    times = sorted(r["t"] for o in outs for r in jsonl(o))
    gap = max(b - a for a, b in zip(times, times[1:], strict=False))
    assert gap <= 2 * HB, f"delivery stopped for {gap:.2f}s"
    print(f"groups: rolling restart of 3 members under 300 msg/s: {total} of {total} delivered, longest pause "
          f"{gap * 1000:.0f} ms")


def test_key_order_holds_and_only_the_changed_members_keys_move_when_one_dies_and_one_joins(ring, workers):
    via = ring.nodes[0].endpoint
    keys = [f"k{i}" for i in range(1000)]
    started = {n: workers(n, via, "keyed", "kw", ordering="key", delay=0.002) for n in ("A", "B", "C", "D")}
    outs = {n: out for n, (_, out) in started.items()}
    rounds = 12
    with Client(via, heartbeat=HB) as publisher:
        publisher.advertise("keyed")

        def joined() -> int:
            members = publisher.topic_info("keyed")["groups"].get("kw", {}).get("per_member", {})
            return sum(1 for m in members.values() if m["joined"])

        wait_for(lambda: joined() == 4, 30, what="the four members joined the publisher")
        for r in range(rounds):
            for k in keys:
                publisher.publish("keyed", f"{k}:{r}", key=k)
            if r == 3:
                started["A"][0].send_signal(signal.SIGKILL)
            if r == 6:
                _, outs["E"] = workers("E", via, "keyed", "kw", ordering="key", delay=0.002)
                wait_for(lambda: joined() == 4, 30, what="E joined the publisher")
            time.sleep(0.2)  # pacing the publisher (rounds spread over a few seconds), not synchronizing
        total = rounds * len(keys)
        wait_for(lambda: {r["seq"] for o in outs.values() for r in jsonl(o)} >= set(range(1, total + 1)), 90,
                 what=f"all {total} delivered")
    records = sorted(((n, r) for n, o in outs.items() for r in jsonl(o)), key=lambda nr: nr[1]["t"])
    first_arrivals: dict[str, list[int]] = defaultdict(list)
    seen: set[int] = set()
    holders: dict[str, set[str]] = defaultdict(set)
    for name, r in records:
        holders[r["key"]].add(name)
        if r["seq"] not in seen:
            seen.add(r["seq"])
            first_arrivals[r["key"]].append(r["seq"])
    disordered = {k: s for k, s in first_arrivals.items() if s != sorted(s)}
    assert not disordered, f"keys whose messages overtook each other: {list(disordered.items())[:3]}"
    moved = {k: h for k, h in holders.items() if len(h - {"A", "E"}) > 1}
    assert not moved, f"keys that moved between members that did not change: {list(moved.items())[:5]}"
    took = Counter(name for name, _ in records)
    assert took["E"] > 0 and all(took[n] > 0 for n in "BCD")
    print(f"groups: {total} keyed messages over 1000 keys, A killed and E added: order held for every key; "
          f"per member {dict(sorted(took.items()))}")


def test_a_poison_message_is_delivered_max_deliver_times_then_dead_lettered_and_replayed(ring, tmp_path):
    via = ring.nodes[1].endpoint
    taken: list[tuple[str, int, int]] = []
    letters = []

    def member(name: str):  # noqa: ANN202
        def take(m) -> None:  # noqa: ANN001
            taken.append((m.text, m.seq, m.deliveries))
            if m.text == "poison":
                raise ValueError("this handler cannot digest it")
        return take

    dirs = [tmp_path / "m0", tmp_path / "m1"]
    with Client(via, heartbeat=HB) as publisher, \
            Client(via, heartbeat=HB, data_dir=dirs[0], on_dead_letter=letters.append) as m0, \
            Client(via, heartbeat=HB, data_dir=dirs[1], on_dead_letter=letters.append) as m1:
        for i, m in enumerate((m0, m1)):
            m.subscribe("meals", group="eaters", max_deliver=3, callback=member(f"m{i}"))
        publisher.advertise("meals")
        for i in range(100):
            publisher.publish("meals", "poison" if i == 50 else f"meal {i}")
        wait_for(lambda: len(letters) == 1 and len({t for t, _, _ in taken if t != "poison"}) == 99, 30,
                 what="99 meals eaten and the poison dead-lettered")
        (letter,) = letters
        assert (letter.payload, letter.from_seq, letter.to_seq) == (b"poison", 51, 51)
        assert "3 deliveries" in letter.reason
        poison = [d for t, _, d in taken if t == "poison"]
        assert poison == [1, 2, 3], "delivered max_deliver times, each one counted"
        assert Counter(t for t, _, _ in taken if t != "poison").most_common(1)[0][1] == 1
        held = [d for d in dirs if json.loads(run_cli("dlq", "show", str(d), "--json").stdout)["letters"]]
        assert len(held) == 1, "the member that saw its last delivery keeps it, with its payload"
        replayed = run_cli("dlq", "replay", str(held[0]), "--via", via, "--json")
        assert replayed.returncode == 0 and json.loads(replayed.stdout)["replayed"] == 1, replayed.stderr
        wait_for(lambda: len([t for t, _, _ in taken if t == "poison"]) > 3, 30, what="the poison replayed")
    print(f"groups: the poison delivered {poison} times, dead-lettered with its payload, replayed; 99 meals once each")


def test_a_durable_groups_backlog_outlives_its_members_and_the_publishers_restart(ring, tmp_path):
    via = ring.nodes[2].endpoint
    pub_dir = tmp_path / "publisher"
    got: list[str] = []
    with Client(via, heartbeat=HB, data_dir=pub_dir, name="kitchen") as publisher:
        with Client(via, heartbeat=HB) as member:
            member.subscribe("tickets", group="cooks", durable=True, callback=lambda m: got.append(m.text))
            publisher.advertise("tickets")
            publisher.publish("tickets", "warm-up")
            wait_for(lambda: got == ["warm-up"], 30, what="the first ticket")
        for i in range(1000):  # every member gone: the group's backlog waits at the publisher
            publisher.publish("tickets", f"ticket {i}")
    got.clear()
    with Client(via, heartbeat=HB, data_dir=pub_dir, name="kitchen") as publisher:
        publisher.advertise("tickets")  # restarted: its durable group comes back from its data directory
        with Client(via, heartbeat=HB) as member:
            member.subscribe("tickets", group="cooks", durable=True, callback=lambda m: got.append(m.text))
            wait_for(lambda: len(set(got)) >= 1000, 60, what="the 1000 tickets after the restart")
    assert set(got) == {f"ticket {i}" for i in range(1000)}
    print(f"groups: a durable group's 1000 messages reached its first member after the publisher's restart "
          f"({len(got)} deliveries)")


def test_priority_goes_first_and_the_backlog_keeps_moving(ring):
    via = ring.nodes[0].endpoint
    order: list[int] = []
    with Client(via, heartbeat=HB) as publisher, Client(via, heartbeat=HB) as slow:
        publisher.advertise("chores")

        def take(m) -> None:  # noqa: ANN001
            order.append(m.priority)
            time.sleep(0.001)  # the work

        sub = slow.subscribe("chores", group="doers", prefetch=10, callback=take)
        for i in range(10_000):
            publisher.publish("chores", f"low {i}", priority=0)
        for i in range(100):
            publisher.publish("chores", f"urgent {i}", priority=9)
        wait_for(lambda: order.count(9) == 100, 60, what="the 100 urgent messages")
        sub.unsubscribe()
    last_urgent = max(i for i, p in enumerate(order) if p == 9)
    first_urgent = order.index(9)
    low_meanwhile = order[first_urgent:last_urgent].count(0)
    assert last_urgent < 5_000, f"the urgent messages came after {last_urgent} of the 10,000 low ones"
    assert low_meanwhile >= 10, "the low priority kept its share meanwhile"
    print(f"groups: 100 priority-9 messages delivered by position {last_urgent} of the 10,000-message backlog, "
          f"{low_meanwhile} priority-0 ones among them")


def test_sub_group_exec_acks_what_the_command_handles_and_dead_letters_what_it_fails(ring, tmp_path):
    via = ring.nodes[1].endpoint
    dead = tmp_path / "dead.jsonl"
    out = tmp_path / "out.jsonl"
    handled = tmp_path / "handled.txt"
    # the command fails on payloads that say "bad", and appends the others to a file
    command = f"sh -c 'read -r line; case $line in *bad*) exit 3;; *) echo $line >> {handled};; esac'"
    with open(out, "w") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "chordpub", "sub", "--via", via, "--topic", "shell-jobs",
                                 "--group", "sh", "--exec", command, "--max-deliver", "2", "--dead-letter", str(dead),
                                 "--print", "--format", "json", "--seconds", "60", "--heartbeat", str(HB)],
                                stdout=stdout, stderr=subprocess.PIPE, text=True, start_new_session=True)
    failure = None
    try:
        with Client(via, heartbeat=HB) as publisher:
            publisher.advertise("shell-jobs")

            def joined() -> bool:
                group = publisher.topic_info("shell-jobs")["groups"].get("sh", {})
                return any(m["joined"] for m in group.get("per_member", {}).values())

            wait_for(joined, 30, what="the shell member joined")
            for i in range(10):
                publisher.publish("shell-jobs", f"bad {i}" if i in (3, 7) else f"good {i}")
            try:
                wait_for(lambda: len(jsonl(dead)) == 2 and handled.exists()
                         and len(handled.read_text().split()) == 16, 60, what="8 handled and 2 dead-lettered")
            except TimeoutError as exc:
                failure = exc
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert failure is None, f"{failure}; handled {handled.read_text() if handled.exists() else None!r}, " \
                            f"dead {jsonl(dead)}, printed {jsonl(out)}, stderr:\n{err[-3000:]}"
    rows = jsonl(out)
    assert sorted(handled.read_text().split()) == sorted(f"{w}" for i in range(10) if i not in (3, 7)
                                                         for w in ("good", str(i))), handled.read_text()
    bad = Counter(r["payload"] for r in rows if r["payload"].startswith("bad"))
    assert bad == {"bad 3": 2, "bad 7": 2}, "redelivered once, then dead-lettered"
    assert all(r["deliveries"] == 1 for r in rows if r["payload"].startswith("good"))
    assert sorted(base64_payload(d) for d in jsonl(dead)) == [b"bad 3", b"bad 7"]
    assert "exited 3" in err
    # the exit summary speaks of this member's share, and of the redeliveries as such
    assert "(group " in err and "as this member's share" in err and " expected from " not in err, err[-2000:]


def base64_payload(letter: dict) -> bytes:
    import base64

    return base64.b64decode(letter["payload_b64"])


@pytest.mark.parametrize("args, words", [
    (["--group", ""], ["--group"]),
    (["--group", "a/b"], ["--group"]),
    (["--group", "g", "--prefetch", "0"], ["--prefetch"]),
    (["--group", "g", "--exec", "no-such-program-here"], ["--exec", "no-such-program-here"]),
    (["--group", "g", "--reliable"], ["--group"]),
    (["--exec", "cat"], ["--group"]),
])
def test_sub_group_refuses_bad_input_in_one_line(args, words):
    one_error_line(run_cli("sub", "--via", "127.0.0.1:1", "--topic", "t", *args), *words)


def test_a_client_refuses_a_group_on_a_topic_it_follows_plainly(ring):
    with Client(ring.nodes[0].endpoint, heartbeat=HB) as client:
        client.subscribe("plainly")
        with pytest.raises(ValueError, match="already subscribed"):
            client.subscribe("plainly", group="g")
        for bad in ("", "a/b", "x" * 129):
            with pytest.raises(ValueError, match="group name"):
                client.subscribe("other", group=bad)
        with pytest.raises(ValueError, match="prefetch"):
            client.subscribe("other", group="g", prefetch=0)
        with pytest.raises(ValueError, match="mode must be direct"):
            client.subscribe("other", group="g", mode="relay")


def test_topic_info_and_the_metrics_show_each_group(ring):
    via = ring.nodes[2].endpoint
    with Client(via, heartbeat=HB, metrics_port=0) as publisher, Client(via, heartbeat=HB, metrics_port=0) as member:
        held = threading.Event()
        sub = member.subscribe("shown", group="viewers", prefetch=5, callback=lambda m: held.wait(30))
        publisher.advertise("shown")
        for i in range(20):
            publisher.publish("shown", str(i))
        wait_for(lambda: publisher.topic_info("shown")["groups"]["viewers"]["in_flight"] == 5, 30,
                 what="the member's prefetch in flight")
        info = publisher.topic_info("shown")["groups"]["viewers"]
        assert info["members"] == [member.id] and info["backlog"] == 15 and info["per_member"][member.id]["joined"]
        pub_samples = scrape(publisher.metrics_endpoint)
        assert value(pub_samples, "chordpub_group_backlog", group="viewers") == 15
        assert value(pub_samples, "chordpub_group_in_flight", group="viewers", member=member.id) == 5
        held.set()
        wait_for(lambda: sub.summary()["acked"] == 20, 30, what="all 20 acked")
        wait_for(lambda: value(scrape(member.metrics_endpoint), "chordpub_member_settled_total", group="viewers",
                               outcome="acked") == 20, 10, what="the member's metrics")
        cli = run_cli("topic", "info", "shown", "--via", via)
        assert cli.returncode == 0 and "group viewers" in cli.stdout and "1 member" in cli.stdout, cli.stdout


def test_the_work_queue_example_runs_and_does_every_job_once(ring):
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "examples" / "work_queue.py"), "--via", ring.nodes[0].endpoint],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {**report, "jobs": 300, "each_once": True, "workers": 4, "dead_lettered": ["job broken"],
                      "keys_in_order": True}
    assert report["group_delivered"] >= 303  # every job once, the broken one three times


def test_pub_gives_keys_per_line_and_priorities_from_the_command_line(ring, tmp_path):
    via = ring.nodes[0].endpoint
    got: list[tuple[str | None, int, str]] = []
    with Client(via, heartbeat=HB) as member:
        member.subscribe("cli-keys", group="k", ordering="key", callback=lambda m: got.append((m.key, m.priority,
                                                                                               m.text)))
        lines = "alice\tfirst\nbob\tsecond\nalice\tthird\nno key here\n"
        proc = subprocess.run([sys.executable, "-m", "chordpub", "pub", "--via", via, "--topic", "cli-keys",
                               "--stdin", "--keyed-lines", "--priority", "7", "--heartbeat", str(HB)],
                              input=lines, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        wait_for(lambda: len(got) == 4, 30, what="the four lines")
    assert sorted(got, key=lambda g: g[2]) == [("alice", 7, "first"), (None, 7, "no key here"), ("bob", 7, "second"),
                                               ("alice", 7, "third")]
    assert "line 4 has no KEY<TAB>" in proc.stderr
    bad = run_cli("pub", "--via", via, "--topic", "t", "--message", "x", "--priority", "10")
    one_error_line(bad, "--priority")
    one_error_line(run_cli("pub", "--via", via, "--topic", "t", "--message", "x", "--keyed-lines"), "--keyed-lines")
