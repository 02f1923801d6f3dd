"""Who may publish and subscribe what: a policy file's rules, and the one function that decides.

Principals are named CURVE keys (`chordpub keys add NAME`); a socket that authenticated a peer with
CurveZMQ knows its principal by name (dht/curve.py's ZAP handler names it). The policy is a TOML file:

    [groups]                          # optional: principals named together
    staff = ["alice", "bob"]

    [principals.writer.publish]
    allow = [">"]
    [principals.reader.subscribe]
    allow = ["open/>"]
    deny  = ["open/private"]
    [principals.staff.subscribe]      # rules for a group apply to each of its members
    allow = ["staff/*"]

Topics are split into levels on "/"; in a pattern `*` matches exactly one level and `>` one or more
trailing levels (only as the last level); any other level matches itself: the subscriptions' grammar
(dht/subjects.py), MQTT's `+` and `#` included. A principal's rules are its
own and those of every group it belongs to; a `deny` that matches wins over any `allow`; with a policy
loaded, what no rule allows is denied (the default that Kafka's KAFKA-14435 shows must not be "allow").
Pure: no sockets, no clocks (pubsub/ and dht/node.py check it where the bytes flow; `PolicyFile`
reloads it when the file changes).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from dht import subjects
from dht.subjects import PatternError

OPS = ("publish", "subscribe")
_NAME = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")  # as key names (dht/curve.py)
DEFAULT = "no rule allows it (default deny)"
DENIED = "permission denied"  # how every refusal by a policy begins, on the wire and in errors


def refusal(principal: str | None, op: str, topic: str, rule: str) -> str:
    """The one line a refused peer is told: who, what, which topic, and the rule that decided."""
    return f"{DENIED}: {principal or 'an unauthenticated peer'} may not {op} {topic!r} ({rule})"


class PolicyError(ValueError):
    """A policy file that cannot be used: one line saying where and why."""


@dataclass(frozen=True)
class Rule:
    owner: str  # the principal or group it was written for
    op: str
    kind: str  # "allow" | "deny"
    pattern: str
    levels: tuple[str, ...]

    @property
    def text(self) -> str:
        return f'{self.owner}.{self.op}.{self.kind} "{self.pattern}"'

    def matches(self, topic_levels: list[str]) -> bool:
        return subjects.matches_levels(self.levels, topic_levels)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str  # the rule that decided, or DEFAULT

    @property
    def word(self) -> str:
        return "allow" if self.allowed else "deny"


def parse_pattern(pattern: object, where: str) -> tuple[str, ...]:
    """A rule's pattern in the subscriptions' grammar (dht/subjects.py)."""
    try:
        return subjects.parse(pattern)  # type: ignore[arg-type]
    except PatternError as exc:
        raise PolicyError(f"{where}: bad pattern: {exc}") from None


class Policy:
    def __init__(self, rules: list[Rule], groups: dict[str, tuple[str, ...]], source: str = "policy") -> None:
        self.source = source
        self.groups = groups
        self._rules: dict[tuple[str, str], list[Rule]] = {}
        for r in rules:
            self._rules.setdefault((r.owner, r.op), []).append(r)
        self.principals = ({r.owner for r in rules} - set(groups)) | {m for ms in groups.values() for m in ms}
        self._memo: dict[tuple[str | None, str, str], Decision] = {}  # bounded below

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise PolicyError(f"cannot read the policy {path}: {exc.strerror or exc}") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str = "policy") -> Policy:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"{source}: not TOML: {exc}") from None
        unknown = set(doc) - {"groups", "principals"}
        if unknown:
            raise PolicyError(f"{source}: unknown table {sorted(unknown)[0]!r} (a policy has [groups] and "
                              "[principals.NAME.publish|subscribe])")
        groups: dict[str, tuple[str, ...]] = {}
        for name, members in (doc.get("groups") or {}).items():
            _check_name(name, f"{source}: group")
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise PolicyError(f"{source}: group {name!r} must list principal names")
            for m in members:
                _check_name(m, f"{source}: group {name!r} member")
            groups[name] = tuple(members)
        rules: list[Rule] = []
        principals = doc.get("principals") or {}
        if not isinstance(principals, dict):
            raise PolicyError(f"{source}: [principals] must be tables [principals.NAME.publish|subscribe]")
        for owner, ops in principals.items():
            _check_name(owner, f"{source}: principal")
            if owner in groups and any(owner in ms for ms in groups.values()):
                raise PolicyError(f"{source}: {owner!r} is a group and a member of one")
            if not isinstance(ops, dict) or set(ops) - set(OPS):
                raise PolicyError(f"{source}: principals.{owner} takes only publish and subscribe, got "
                                  f"{sorted(set(ops) - set(OPS)) if isinstance(ops, dict) else ops!r}")
            for op, lists in ops.items():
                where = f"{source}: principals.{owner}.{op}"
                if not isinstance(lists, dict) or set(lists) - {"allow", "deny"}:
                    raise PolicyError(f"{where} takes only allow and deny lists")
                for kind in ("allow", "deny"):
                    patterns = lists.get(kind, [])
                    if not isinstance(patterns, list):
                        raise PolicyError(f"{where}.{kind} must be a list of patterns")
                    for pattern in patterns:
                        rules.append(Rule(owner, op, kind, pattern, parse_pattern(pattern, f"{where}.{kind}")))
        return cls(rules, groups, source)

    def knows(self, principal: str) -> bool:
        return principal in self.principals

    def decide(self, principal: str | None, op: str, topic: str) -> Decision:
        """May `principal` do `op` on `topic`? Deny wins; nothing allowing it denies it."""
        key = (principal, op, topic)
        memo = self._memo.get(key)
        if memo is not None:
            return memo
        decision = self._decide(principal, op, topic)
        if len(self._memo) >= 65_536:  # a bounded cache: decisions are pure, so dropping it is safe
            self._memo.clear()
        self._memo[key] = decision
        return decision

    def decide_pattern(self, principal: str | None, op: str, pattern: str) -> Decision:
        """May `principal` do `op` on some topic `pattern` matches? Allowed when an allow rule overlaps
        the pattern and no deny rule covers all of it: the topics it may not have are then withheld
        one by one where they flow (the publishers' gates), not the pattern as a whole. A pattern
        that is not one (no wildcard level) is a topic: `decide`."""
        if not subjects.is_pattern(pattern):
            return self.decide(principal, op, pattern)
        if op not in OPS:
            raise ValueError(f"op is publish or subscribe, not {op!r}")
        if principal is None:
            return Decision(False, "no principal: the connection is not authenticated with a named key")
        try:
            levels = subjects.parse(pattern)
        except PatternError as exc:
            return Decision(False, str(exc))
        owners = [principal, *(g for g, ms in self.groups.items() if principal in ms)]
        allow: Rule | None = None
        for owner in owners:
            for rule in self._rules.get((owner, op), ()):
                if rule.kind == "deny" and subjects.covers(rule.levels, levels):
                    return Decision(False, rule.text)
                if rule.kind == "allow" and allow is None and subjects.overlaps(rule.levels, levels):
                    allow = rule
        return Decision(True, allow.text) if allow is not None else Decision(False, DEFAULT)

    def withheld(self, principal: str, op: str, pattern: str) -> list[str]:
        """The deny rules that take some topics out of what `pattern` would give `principal` (their
        patterns): what `acl check` names beside a pattern's answer."""
        levels = subjects.parse(pattern)
        owners = [principal, *(g for g, ms in self.groups.items() if principal in ms)]
        return sorted({r.pattern for o in owners for r in self._rules.get((o, op), ())
                       if r.kind == "deny" and subjects.overlaps(r.levels, levels)})

    def _decide(self, principal: str | None, op: str, topic: str) -> Decision:
        if op not in OPS:
            raise ValueError(f"op is publish or subscribe, not {op!r}")
        if principal is None:
            return Decision(False, "no principal: the connection is not authenticated with a named key")
        owners = [principal, *(g for g, ms in self.groups.items() if principal in ms)]
        levels = topic.split("/")
        allow: Rule | None = None
        for owner in owners:
            for rule in self._rules.get((owner, op), ()):
                if rule.matches(levels):
                    if rule.kind == "deny":
                        return Decision(False, rule.text)
                    allow = allow or rule
        return Decision(True, allow.text) if allow is not None else Decision(False, DEFAULT)


def _check_name(name: object, what: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise PolicyError(f"{what} name {name!r} is not 1..128 of A-Z a-z 0-9 . _ : @ -")


class PolicyFile:
    """A policy read from a file, and read again when the file changes (`check()`, called on a
    timer by whoever enforces it; or `reload()`, on SIGHUP). A file that turns bad keeps the last
    good policy in force, and says so once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.policy = Policy.load(self.path)
        self._stamp = self._stat()
        self.version = 1  # moves on every reload that changed the policy in force
        self.error: str | None = None

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def check(self) -> bool:
        """Reload if the file changed; True when the policy in force changed."""
        stamp = self._stat()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        return self.reload()

    def reload(self) -> bool:
        try:
            fresh = Policy.load(self.path)
        except PolicyError as exc:
            self.error = str(exc)
            return False
        self.error = None
        self.policy = fresh
        self.version += 1
        return True


def item_refusal(policy: Policy, principal: str | None, item: dict) -> tuple[str, str, Decision] | None:
    """A `records` item judged, as a node does before applying it: writing a publisher's field (or
    its archive) needs publish permission on the topic; a subscriber's or a group member's field,
    and reading the record (publishers' endpoints, the archive, the groups), subscribe permission —
    the groups, publish permission too; a prefix record is judged by what it holds
    (`prefix_refusal`). (op, what, decision) of the first refusal, or None."""
    if item["k"].endswith(subjects.PREFIX_RECORD):
        return prefix_refusal(policy, principal, item)
    field, ops = item.get("f") or "", []
    if item.get("op") in ("set", "renew", "del"):
        ops.append("publish" if field.startswith(("pub/", "log/")) else "subscribe")
    if "read" in item or "names" in item:  # the publishers' endpoints, the archive, the groups
        ops.append("subscribe")
    for op in ops:
        d = policy.decide(principal, op, item["k"])
        if not d.allowed and op == "subscribe" and str(item.get("read", "")).startswith("grp/") \
                and "names" not in item and policy.decide(principal, "publish", item["k"]).allowed:
            continue  # a publisher reads the groups it owes messages to
        if not d.allowed:
            return op, item["k"], d
    return None


def prefix_refusal(policy: Policy, principal: str | None, item: dict) -> tuple[str, str, Decision] | None:
    """A `records` item on a prefix record `L/>` (dht/subjects.py), judged: announcing a topic there
    needs publish permission on that topic; placing patterns, subscribe permission on some topic each
    of them matches; reading the record, or renewing or deleting a field of it, permission on some
    topic under L (subscribe; publish for a publisher reading the patterns). (op, what, decision) of
    the first refusal, or None."""
    key, field, op = item["k"], item.get("f") or "", item.get("op")
    asks: list[tuple[str, str]] = []
    if op == "set" and field.startswith(subjects.ANNOUNCE):
        asks.append(("publish", subjects.announced_topic(item.get("val")) or key))
    elif op == "set" and field.startswith(subjects.WATCHER):
        patterns = subjects.watched_patterns(item.get("val"))
        asks.extend(("subscribe", p) for p in (patterns or [key]))
    elif op is not None:
        asks.append(("publish" if field.startswith(subjects.ANNOUNCE) else "subscribe", key))
    if "read" in item or "names" in item:
        asks.append(("publish" if str(item.get("read", "")).startswith(subjects.WATCHER) else "subscribe", key))
    for what, target in asks:
        d = policy.decide_pattern(principal, what, target)
        if not d.allowed:
            return what, target, d
    return None
