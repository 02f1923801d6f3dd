"""The suite's habits that a reader relies on: every acceptance test listed in docs/testing.md says in
its docstring how to see it fail, every test that says so is listed there, and every mutant listed
there (`make mutants`) still finds its text in its file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTE = re.compile(r"To see (it|them|these) fail")


def listed() -> set[str]:
    """The test files docs/testing.md's mutants name."""
    from tests.mutants import listed as mutants

    return {arg.split("::")[0] for m in mutants() for arg in m.test.split() if arg.startswith("tests/")}


def docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
    return [" ".join(d.split()) for d in map(ast.get_docstring, nodes) if d]


def test_every_listed_acceptance_test_says_how_to_see_it_fail():
    files = listed()
    assert len(files) >= 10, files
    missing = [f for f in sorted(files) if not (ROOT / f).exists()]
    assert not missing, f"docs/testing.md names files that do not exist: {missing}"
    silent = [f for f in sorted(files) if not any(NOTE.search(d) for d in docstrings(ROOT / f))]
    assert not silent, f"no 'To see it fail' note in a docstring of {silent}"


def test_every_test_that_says_how_to_see_it_fail_is_listed():
    saying = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
              if any(NOTE.search(d) for d in docstrings(p))}
    assert saying - listed() == set(), "add them to the table in docs/testing.md"


def test_every_mutant_finds_its_text_once():
    from tests.mutants import listed as mutants

    stale = []
    for m in mutants():
        count = (ROOT / m.file).read_text().count(m.replace)
        if count != 1:
            stale.append(f"{m.name}: found {count} times")
    assert not stale, stale


def test_a_resumed_mutants_run_skips_only_what_its_log_calls_caught(tmp_path):
    from tests.mutants import caught_before
    from tests.mutants import listed as mutants

    first, second = mutants()[:2]
    log = tmp_path / "mutants.log"
    log.write_text(f"[1/9] caught   {first.name}  [{first.test}]  40 s\n"
                   f"[2/9] MISSED (passed on run 3) {second.name}  [{second.test}]  90 s\n")
    assert caught_before(log) == {first.name}
    assert caught_before(tmp_path / "none.log") == set()


PACKAGES = ("dht", "pubsub", "sim", "topologies", "traces", "chordpub", "tests", "benchmarks", "examples")
LONG = 420  # "no file past ~400 lines without a reason written at its top"


def test_a_long_file_says_why_at_its_top():
    long = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            text = path.read_text()
            if "v1" in path.parts or text.count("\n") <= LONG:  # v1/: stubs generated from the .proto
                continue
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Long because" not in doc:
                long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not long, f"split these by job, or say why they are long ('Long because ...') at their top: {long}"


def test_no_import_cycles():
    """Every import among the project's modules, TYPE_CHECKING ones too: a directed graph without cycles.
    To see it fail: import the Client in pubsub/group_client.py ("import cycle: pubsub.client -> ...")."""
    project = {"dht", "pubsub", "sim", "topologies", "traces", "chordpub"}
    graph: dict[str, set[str]] = {}
    for pkg in project:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            deps = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in project:
                    deps |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
                elif isinstance(node, ast.Import):
                    deps |= {a.name for a in node.names if a.name.split(".")[0] in project}
            graph[name] = deps
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    done: set[str] = set()

    def cycle_from(m: str, path: list[str]) -> list[str] | None:
        if m in path:
            return path[path.index(m):] + [m]
        if m in done:
            return None
        for d in sorted(graph[m]):
            found = cycle_from(d, [*path, m])
            if found:
                return found
        done.add(m)
        return None

    cycles = [c for m in sorted(graph) if (c := cycle_from(m, []))]
    assert not cycles, f"import cycle: {' -> '.join(cycles[0])}"
