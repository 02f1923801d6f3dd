"""A study: a grid of experiment points (publishers × subscribers × modes × topologies × ...) run one
after the other into one study directory, each point a complete run directory in the trace schema.

austinjhunt's framework (../shared/reference) measured latency against the number of publishers and
subscribers for direct and broker dissemination; a study is that loop, the aggregation
(traces/study_report.py) and the figure in one command each. A study is given by options or by a
TOML file (tomllib): settings (backend, repeats, seconds, ...) and axes, each a value or a list of
values; the grid is every combination of the axes' values, times `repeats`.

The study directory holds study.json (the settings, the axes and every point with its parameters)
and runs/<point>/ (topologies/experiment.py). A point whose run directory has its summary is done:
running the same study again skips it and redoes only what an interruption left half made. A grid
the machine cannot hold (memory, or on Mininet a topology with fewer hosts than a point has
processes) is refused before anything starts.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from topologies.experiment import Experiment, ExperimentConfig, ExperimentError
from topologies.graphs import TopologyError, build, hosts, parse_delay, parse_spec
from topologies.hosts import BACKENDS
from topologies.run_summary import subscribers_per_topic
from traces.writer import run_complete

FORMAT = "chordpub-study/1"
PROCESS_MB = 80  # resident memory of one chordpub process (a node or a client: ~62 MB measured), with margin
MAX_PROCESSES_PER_CORE = 40  # beyond this, start-up alone takes longer than most points' publishing
MODES = ("direct", "relay")

# axis -> (parse one value, default values)
AXES: dict[str, tuple[Callable[[object], object], list]] = {}
SETTINGS: dict[str, tuple[Callable[[object], object], object]] = {}


class StudyError(ValueError):
    """A study that cannot be run as given: one clear line for the user."""


def _int(minimum: int) -> Callable[[object], int]:
    def parse(v: object) -> int:
        if isinstance(v, bool) or not isinstance(v, int | str) or not str(v).strip().isdigit():
            raise ValueError(f"expected an integer >= {minimum}, got {v!r}")
        if int(v) < minimum:
            raise ValueError(f"expected an integer >= {minimum}, got {v!r}")
        return int(v)
    return parse


def _positive(v: object) -> float:
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"expected a positive number, got {v!r}") from None
    if isinstance(v, bool) or not x > 0:
        raise ValueError(f"expected a positive number, got {v!r}")
    return x


def _choice(options: tuple[str, ...]) -> Callable[[object], str]:
    def parse(v: object) -> str:
        if v not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {v!r}")
        return str(v)
    return parse


def _topo(v: object) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a topology spec, got {v!r}")
    try:
        parse_spec(v)
    except TopologyError as exc:
        raise ValueError(str(exc)) from None
    return v.strip()


def _delay(v: object) -> float | None:
    if v is None or v == "":
        return None
    try:
        return parse_delay(str(v))
    except TopologyError as exc:
        raise ValueError(str(exc)) from None


def _bool(v: object) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {v!r}")
    return v


AXES.update({
    "pubs": (_int(1), [1]), "subs": (_int(1), [1]), "topics": (_int(1), [1]),
    "topics_per_pub": (_int(1), [1]), "topics_per_sub": (_int(1), [1]), "mode": (_choice(MODES), ["direct"]),
    "topo": (_topo, ["single"]), "delay": (_delay, [None]), "rate": (_positive, [10.0]),
    "size": (_int(8), [100]), "dht": (_int(1), [2]),
})
SETTINGS.update({
    "name": (str, None), "backend": (_choice(BACKENDS), "mininet"), "repeats": (_int(1), 1),
    "seconds": (_positive, 5.0), "stabilize": (_positive, 0.5), "seed": (_int(0), None),
    "shared_hosts": (_bool, False),
})


@dataclass(frozen=True)
class Point:
    name: str
    repeat: int
    params: dict  # one value of every axis (topo resolved: "single" sized to the point)

    @property
    def processes(self) -> int:
        return self.params["dht"] + self.params["pubs"] + self.params["subs"]

    def to_dict(self) -> dict:
        p = self.params
        return {"name": self.name, "repeat": self.repeat, "params": p,
                "subscribers_per_topic": subscribers_per_topic(p["subs"], p["topics_per_sub"], p["topics"])}


@dataclass
class StudySpec:
    axes: dict[str, list] = field(default_factory=dict)  # every axis, with its values (parsed)
    settings: dict = field(default_factory=dict)

    @classmethod
    def make(cls, axes: dict[str, object], settings: dict[str, object], where: str = "") -> StudySpec:
        """Check and complete raw axes (a value or a list each) and settings; StudyError names what is wrong."""
        where = f"{where}: " if where else ""
        spec = cls()
        for name, (parse, default) in AXES.items():
            raw = axes.get(name)
            values = default if raw is None else (raw if isinstance(raw, list) else [raw])
            if not values:
                raise StudyError(f"{where}empty grid: {name!r} has no values")
            try:
                parsed = [parse(v) for v in values]
            except ValueError as exc:
                raise StudyError(f"{where}{name}: {exc}") from None
            if len(set(map(str, parsed))) != len(parsed):
                raise StudyError(f"{where}{name}: a value is repeated")
            spec.axes[name] = parsed
        for name, (parse, default) in SETTINGS.items():
            raw = settings.get(name)
            try:
                spec.settings[name] = default if raw is None else parse(raw)
            except ValueError as exc:
                raise StudyError(f"{where}{name}: {exc}") from None
        if spec.settings["backend"] == "local":
            if axes.get("topo") is not None or axes.get("delay") is not None:
                raise StudyError(f"{where}the local backend runs every process on loopback: topo and delay "
                                 "need the mininet backend")
            spec.axes["topo"] = ["loopback"]
        for point in spec.points():
            p = point.params
            for name in ("topics_per_pub", "topics_per_sub"):
                if p[name] > p["topics"]:
                    raise StudyError(f"{where}{name} {p[name]} is more than topics {p['topics']} "
                                     f"(point {point.name})")
        return spec

    @classmethod
    def from_toml(cls, path: Path, overrides: dict[str, object] | None = None) -> StudySpec:
        """A study file: settings and axes as top-level keys (a table [study] or [grid] may group them)."""
        try:
            doc = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise StudyError(f"cannot read {path}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise StudyError(f"{path} is not TOML: {exc}") from None
        flat: dict[str, object] = {}
        for key, value in doc.items():
            if key in ("study", "grid") and isinstance(value, dict):
                flat.update(value)
            else:
                flat[key] = value
        unknown = sorted(set(flat) - set(AXES) - set(SETTINGS))
        if unknown:
            raise StudyError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join([*SETTINGS, *AXES])})")
        flat.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return cls.make({k: v for k, v in flat.items() if k in AXES},
                        {k: v for k, v in flat.items() if k in SETTINGS}, where=str(path))

    def varying(self) -> list[str]:
        return [name for name, values in self.axes.items() if len(values) > 1]

    def points(self) -> list[Point]:
        names = list(self.axes)
        varying = self.varying() or ["pubs", "subs"]
        repeats = self.settings["repeats"]
        out = []
        for values in itertools.product(*(self.axes[n] for n in names)):
            params = dict(zip(names, values, strict=True))
            processes = params["dht"] + params["pubs"] + params["subs"]
            if params["topo"] == "single":
                params["topo"] = f"single,{processes}"  # one host per process
            label = "-".join(_label(n, params[n]) for n in varying)
            for r in range(1, repeats + 1):
                name = f"{len(out) + 1:03d}-{label}" + (f"-r{r}" if repeats > 1 else "")
                out.append(Point(name, r, params))
        return out

    def to_dict(self) -> dict:
        return {"axes": self.axes, "settings": self.settings}

    def check_capacity(self) -> None:
        """Refuse, before anything starts, a grid this machine cannot hold."""
        points = self.points()
        most = max(p.processes for p in points)
        cores = os.cpu_count() or 1
        if most > MAX_PROCESSES_PER_CORE * cores:
            raise StudyError(f"a point needs {most} processes, more than this machine's {cores} cores can start "
                             f"in a useful time ({MAX_PROCESSES_PER_CORE} per core)")
        available = _available_mb()
        if available is not None and most * PROCESS_MB > available:
            raise StudyError(f"a point needs {most} processes (~{most * PROCESS_MB} MB), more than the "
                             f"{available} MB of memory available")
        if self.settings["backend"] != "mininet":
            return
        for topo in {p.params["topo"] for p in points}:
            try:
                n = len(hosts(build(topo, seed=self.settings["seed"])))
            except TopologyError as exc:
                raise StudyError(f"topology {topo!r}: {exc}") from None
            need = max(p.processes for p in points if p.params["topo"] == topo)
            if need > n and not self.settings["shared_hosts"]:
                raise StudyError(f"topology {topo!r} has {n} hosts and cannot hold a point's {need} processes "
                                 "(one per host; give a larger topology, 'single' to size it, or shared_hosts = true)")
        from topologies.mininet_net import MininetError, check_runnable

        try:
            check_runnable()
        except MininetError as exc:
            raise StudyError(f"{exc} (or run the study with --backend local)") from None


def _label(name: str, value: object) -> str:
    short = {"pubs": "p", "subs": "s", "topics": "t", "topics_per_pub": "tpp", "topics_per_sub": "tps",
             "mode": "", "topo": "", "delay": "d", "rate": "r", "size": "b", "dht": "n"}[name]
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9.]+", "_", f"{short}{text}")


def _available_mb() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


def load_study(study: Path) -> dict:
    """study.json of a study directory; StudyError when it is not one."""
    path = Path(study) / "study.json"
    try:
        doc = json.loads(path.read_text())
    except OSError:
        raise StudyError(f"{study} is not a study directory (no study.json)") from None
    except json.JSONDecodeError as exc:
        raise StudyError(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("points"), list):
        raise StudyError(f"{path} is not a chordpub study")
    return doc


def run_study(spec: StudySpec, out: Path, on_point: Callable[[int, Point, str], None] = lambda *_: None,
              progress: Callable[[str], None] = lambda _m: None, log_level: str = "INFO") -> dict:
    """Run every point not done yet; `on_point(i, point, "skipped"|"running"|"done")` follows along.
    `log_level` is every process's; their logs are kept in each run directory's logs/."""
    spec.check_capacity()
    points = spec.points()
    out = Path(out)
    doc = {"format": FORMAT, **spec.to_dict(), "points": [p.to_dict() for p in points]}
    if (out / "study.json").exists():
        held = load_study(out)
        if {k: held.get(k) for k in ("axes", "settings", "points")} != json.loads(json.dumps(
                {k: doc[k] for k in ("axes", "settings", "points")})):
            raise StudyError(f"{out} holds another study: give a new --out, or the same study to resume it")
    else:
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / "study.json.tmp"
        tmp.write_text(json.dumps({**doc, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=2) + "\n")
        os.replace(tmp, out / "study.json")
    runs = out / "runs"
    t0, ran, skipped = time.monotonic(), 0, 0
    for i, point in enumerate(points):
        run_dir = runs / point.name
        if run_complete(run_dir):
            skipped += 1
            on_point(i, point, "skipped")
            continue
        if run_dir.exists():
            shutil.rmtree(run_dir)  # half made by an interruption
        on_point(i, point, "running")
        p, s = point.params, spec.settings
        seed = None if s["seed"] is None else s["seed"] + i
        config = ExperimentConfig(
            topo=p["topo"], dht=p["dht"], pubs=p["pubs"], subs=p["subs"], delay_ms=p["delay"],
            seconds=s["seconds"], mode=p["mode"], seed=seed, out=runs, run=point.name, rate=p["rate"],
            size=p["size"], topics=p["topics"], topics_per_pub=p["topics_per_pub"],
            topics_per_sub=p["topics_per_sub"], stabilize=s["stabilize"], backend=s["backend"], log_level=log_level)
        try:
            Experiment(config, progress=progress).run()
        except ExperimentError as exc:
            raise StudyError(f"point {point.name}: {exc}") from None
        ran += 1
        on_point(i, point, "done")
    return {"study": str(out), "points": len(points), "ran": ran, "skipped": skipped,
            "wall_s": round(time.monotonic() - t0, 2)}
