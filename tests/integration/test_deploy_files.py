"""The Dockerfile and compose.yaml, checked where Docker is absent: instructions Docker knows, sources
that exist, every package copied, and every command one the CLI accepts (`config show` parses it)."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
                "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    rows = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(r.split(None, 1)[0], r.split(None, 1)[1] if " " in r else "") for r in rows]


def test_the_dockerfile_has_only_known_instructions_and_starts_from_an_image():
    rows = instructions()
    assert rows[0][0] == "FROM"
    assert all(word in INSTRUCTIONS for word, _ in rows), [w for w, _ in rows if w not in INSTRUCTIONS]


def test_the_image_holds_every_package_and_its_sources_exist():
    copied = [args.split()[0] for word, args in instructions() if word == "COPY"]
    assert all((ROOT / src).exists() for src in copied), copied
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    packages = {p.strip() for p in cfg["options.packages.find"]["include"].split() if "." not in p}
    assert packages <= set(copied)


def test_the_images_commands_are_ones_the_cli_accepts():
    rows = dict(instructions())
    assert json.loads(rows["ENTRYPOINT"]) == ["chordpub"]
    proc = run_cli("config", "show", *json.loads(rows["CMD"]))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("service", ["seed", "node", "subscriber", "publisher", "gateway"])
def test_every_compose_service_runs_a_command_the_cli_accepts(service):
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    spec = compose["services"][service]
    assert spec.get("image") == "chordpub"
    proc = run_cli("config", "show", *spec["command"])
    assert proc.returncode == 0, proc.stderr


def test_config_show_refuses_an_unknown_option():
    proc = run_cli("config", "show", "node", "start", "--bogus", "1")
    assert proc.returncode == 2 and "No such option: --bogus" in proc.stderr
