"""`make mutants`: every mutant docs/testing.md lists must make its test fail, 5 runs out of 5.

    python -m tests.mutants [--runs 5] [--only WORD] [--list] [--jobs N] [--start N] [--log FILE]

docs/testing.md lists the mutants in one YAML block (after the line "```yaml mutants"): for each, the
test to run (pytest node ids, space-separated), the file to change, the text to replace (it must
occur exactly once: a mutant whose text is gone is stale, and fails the run), what replaces it, and
what the failure says. Each mutant is applied to a scratch copy of the work tree with an install of
its own (a virtual environment layered on this one's packages, whose `chordpub` is the copy's), so
that the node and client processes a test starts run the mutant too. A mutant is caught when its test
fails in every run; one passing run is enough to call it missed (the later runs are skipped). Prints
one line per mutant, and exits 1 when any was missed or stale. With `--log FILE` each line is also
appended to FILE, and a mutant FILE already calls caught is not judged again: a run of hours that is
interrupted goes on where it stopped when the same command is given again.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "testing.md"
FENCE = "```yaml mutants"


@dataclass
class Mutant:
    test: str
    file: str
    replace: str
    with_: str
    says: str

    @property
    def name(self) -> str:
        return f"{self.file}: {self.replace.strip()[:50]!r} -> {self.with_.strip()[:50]!r}"


def listed(doc: Path = DOC) -> list[Mutant]:
    """The mutants of docs/testing.md's YAML block."""
    text = doc.read_text()
    start = text.index(FENCE) + len(FENCE)
    block = text[start:text.index("```", start)]
    return [Mutant(m["test"], m["file"], m["replace"], m["with"], m["says"]) for m in yaml.safe_load(block)]


def caught_before(log: Path) -> set[str]:
    """The names of the mutants an earlier run's log calls caught."""
    if not log.exists():
        return set()
    found = (re.match(r"\[\d+/\d+\] caught +(.*)  \[", line) for line in log.read_text().splitlines())
    return {m.group(1) for m in found if m}


def scratch_copy(into: Path) -> Path:
    """The work tree as git sees it (tracked and new files, not what .gitignore hides), copied."""
    tree = into / "tree"
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / name)
    return tree


def scratch_venv(tree: Path) -> Path:
    """A virtual environment whose packages are this one's, but whose chordpub is `tree`'s."""
    venv = tree / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", ask], capture_output=True, text=True,
                               check=True).stdout.strip())
    (site / "zz_parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "__editable__.chordpub.pth").write_text(str(tree) + "\n")
    script = venv / "bin" / "chordpub"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom chordpub.entry import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return venv


def apply(tree: Path, m: Mutant) -> str:
    """Apply `m`; returns the file's text before (to restore it)."""
    path = tree / m.file
    before = path.read_text()
    count = before.count(m.replace)
    if count != 1:
        raise LookupError(f"{m.file}: the text to replace occurs {count} times (stale mutant?)")
    path.write_text(before.replace(m.replace, m.with_))
    return before


ONE_NETWORK = threading.Lock()  # Mininet tests one at a time, as in the suite: their hosts and switches share names


def run_test(tree: Path, venv: Path, m: Mutant, timeout: float) -> tuple[bool, float]:
    """(whether the test failed, seconds)."""
    if m.test.startswith("tests/mininet/"):
        with ONE_NETWORK:
            return _run_test(tree, venv, m, timeout)
    return _run_test(tree, venv, m, timeout)


def _run_test(tree: Path, venv: Path, m: Mutant, timeout: float) -> tuple[bool, float]:
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    t0 = time.monotonic()
    try:
        proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-x", "-n", "0", "--no-header",
                               "-p", "no:cacheprovider", "-o", "addopts=", *m.test.split()], cwd=tree, env=env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        failed = proc.returncode != 0
    except subprocess.TimeoutExpired:
        failed = True  # a test that hangs under the mutant has not passed
    return failed, time.monotonic() - t0


def judge(tree: Path, venv: Path, m: Mutant, runs: int, timeout: float) -> tuple[str, float]:
    """Apply `m` in `tree`, run its test up to `runs` times, restore the file: (verdict, seconds)."""
    try:
        before = apply(tree, m)
    except LookupError as exc:
        return f"STALE    {exc}", 0.0
    try:
        times = []
        for _ in range(runs):
            failed, seconds = run_test(tree, venv, m, timeout)
            times.append(seconds)
            if not failed:
                break
        caught = failed and len(times) == runs
    finally:
        (tree / m.file).write_text(before)
    return ("caught" if caught else f"MISSED (passed on run {len(times)})"), sum(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="Runs of each mutant's test; every one must fail.")
    ap.add_argument("--only", help="Only the mutants whose test, file or text contains this.")
    ap.add_argument("--list", action="store_true", help="List the mutants and exit.")
    ap.add_argument("--timeout", type=float, default=600.0, help="Seconds a run may take (then it counts as failed).")
    ap.add_argument("--start", type=int, default=1, help="Begin at the Nth mutant of the list (resuming a run).")
    ap.add_argument("--jobs", type=int, default=1,
                    help="Mutants judged at once, each in a scratch copy of its own (most tests wait on "
                         "processes and sockets more than they compute: 2-3 suit two cores).")
    ap.add_argument("--log", type=Path, help="Append each verdict to this file, and skip the mutants it "
                                             "already calls caught (to resume an interrupted run).")
    args = ap.parse_args()
    if min(args.jobs, args.runs, args.start) < 1:
        ap.error("--jobs, --runs and --start must be at least 1")
    mutants = [m for m in listed() if not args.only or args.only in f"{m.test} {m.file} {m.replace} {m.with_}"]
    if args.list:
        for m in mutants:
            print(f"{m.test}\n    {m.name}\n    says: {m.says}")
        return
    todo: queue.Queue[tuple[int, Mutant]] = queue.Queue()
    done = caught_before(args.log) if args.log else set()
    earlier = 0
    for i, m in list(enumerate(mutants, 1))[args.start - 1:]:
        if m.name in done:
            earlier += 1
        else:
            todo.put((i, m))
    missed: list[str] = []
    lock = threading.Lock()

    def worker(into: Path) -> None:
        into.mkdir()
        tree = scratch_copy(into)
        venv = scratch_venv(tree)
        subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-q", "dht", "pubsub", "chordpub"],
                       cwd=tree, capture_output=True)
        while True:
            try:
                i, m = todo.get_nowait()
            except queue.Empty:
                return
            verdict, seconds = judge(tree, venv, m, args.runs, args.timeout)
            line = f"[{i}/{len(mutants)}] {verdict:8} {m.name}  [{m.test}]  {seconds:.0f} s"
            with lock:
                if verdict != "caught":
                    missed.append(m.name)
                print(line, flush=True)
                if args.log:
                    with args.log.open("a") as log:
                        print(line, file=log)

    with tempfile.TemporaryDirectory(prefix="chordpub-mutants-") as tmp:
        threads = [threading.Thread(target=worker, args=(Path(tmp) / f"job{j}",)) for j in range(args.jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    judged = len(mutants) - args.start + 1
    before = f" ({earlier} of them in an earlier run, by {args.log})" if earlier else ""
    print(f"{judged - len(missed)} of {judged} mutants caught in {args.runs} of {args.runs} runs{before}")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
