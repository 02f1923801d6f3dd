"""`chordpub acl check PRINCIPAL TOPIC`: what a policy file says of one principal and one topic."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from chordpub.cli_common import clean_errors, fail

acl_app = typer.Typer(help="Policies: who may publish and subscribe which topics (docs/security.md).",
                      no_args_is_help=True)


@acl_app.command("check")
@clean_errors
def check(principal: str = typer.Argument(..., help="A principal the policy names (a key's name)."),
          topic: str = typer.Argument(..., help="The topic, or a pattern (sensors/*/temp, orders/>)."),
          acl: Path = typer.Option(..., "--acl", help="The policy file (TOML)."),
          op: str = typer.Option(None, "--op", help="Only this operation: publish or subscribe."),
          as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
          exit_code: bool = typer.Option(False, "--exit-code", help="Exit 1 when the answer to any operation "
                                         "asked is 'may not' (as `git diff --exit-code`), for scripts.")) -> None:
    """Say whether PRINCIPAL may publish and subscribe TOPIC under the policy, and which rule decided
    (deny wins; what no rule allows is denied). TOPIC may be a pattern: then whether some topic it
    matches is allowed, and which deny rules withhold the rest ("withheld" in --json). Exit 0 whatever
    the answer (with --exit-code: 1 when one is 'may not'); 2 for a bad file, an unknown principal or
    operation, a malformed pattern."""
    from dht.policy import OPS, Policy, PolicyError

    if op is not None and op not in OPS:
        fail(f"--op must be publish or subscribe, got {op!r}")
    try:
        policy = Policy.load(acl)
    except PolicyError as exc:
        fail(str(exc))
    if not policy.knows(principal):
        known = ", ".join(sorted(policy.principals)) or "none"
        fail(f"unknown principal {principal!r}: {acl} names {known}")
    ops = [op] if op else list(OPS)
    from dht.subjects import PatternError, check_subscribable, is_pattern

    try:
        check_subscribable(topic)
    except PatternError as exc:
        fail(str(exc))
    pattern = is_pattern(topic)
    decisions = {o: policy.decide_pattern(principal, o, topic) for o in ops}
    out: dict = {"principal": principal, "topic": topic, **{o: d.word for o, d in decisions.items()}}
    out["rule"] = decisions[op].rule if op else {o: d.rule for o, d in decisions.items()}
    withheld = {o: policy.withheld(principal, o, topic) for o, d in decisions.items() if pattern and d.allowed}
    if pattern:
        out["withheld"] = withheld
    if as_json:
        typer.echo(json.dumps(out))
    else:
        for o, d in decisions.items():
            some = ("some topics of " if d.allowed else "any topic of ") if pattern else ""
            but = f"; withheld: {', '.join(withheld[o])}" if withheld.get(o) else ""
            typer.echo(f"{principal} may {'' if d.allowed else 'not '}{o} {some}{topic!r}: {d.rule}{but}")
    if exit_code and not all(d.allowed for d in decisions.values()):
        raise typer.Exit(1)
