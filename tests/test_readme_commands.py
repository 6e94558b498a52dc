"""README.md's commands, as a newcomer copies them (issue 19): each is `chamberlab ...` (the console script
`make run` installs), each parses with the real parser, and the ones that only read run as written from the
project folder, so an example pointing at a file that is not where it says fails here."""

from __future__ import annotations

import re
import shlex

import pytest

import bench_cli
from conftest import shared_path
from support import PROJECT_ROOT, run_cli

README = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")


def readme_commands() -> list[str]:
    """Every `chamberlab ...` line of a fenced code block and every inline `chamberlab ...` span."""
    found: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", README, flags=re.S):
        found += [line.strip() for line in block.splitlines() if line.strip().startswith("chamberlab ")]
    prose = re.sub(r"```[a-z]*\n.*?```", "", README, flags=re.S)
    found += [span.replace("\\|", "|") for span in re.findall(r"`(chamberlab [^`]+)`", prose)]
    return found


COMMANDS = readme_commands()
READ_ONLY = ("datasheet build", "datasheet search", "datasheet section", "datasheet table", "station check",
             "chamber run ../shared/chamber-data/protocols/wt_validate_v1/validate_osr_1.txt --validate-only")


def test_the_readme_writes_every_command_as_the_installed_script():
    assert len(COMMANDS) >= 40, COMMANDS
    assert "bench_cli.py" not in README.replace("bench_cli:main", "")
    assert "source .venv/bin/activate" in README and ".venv/bin/chamberlab" in README


@pytest.mark.parametrize("line", COMMANDS)
def test_every_readme_command_parses_with_the_real_parser(line):
    argv = shlex.split(line, comments=True)[1:]
    if argv in (["--help"], ["run", "--help"]):
        return
    try:
        args = bench_cli.build_parser().parse_args(argv)
    except bench_cli.UsageError as exc:
        pytest.fail(f"README command {line!r} does not parse: {exc}")
    assert callable(args.handler)


@pytest.mark.parametrize("line", [c for c in COMMANDS if c.removeprefix("chamberlab ").startswith(READ_ONLY)])
def test_readme_commands_that_only_read_run_as_written(line, capsys, monkeypatch):
    shared_path("datasheets", "DPS310.pdf")
    monkeypatch.chdir(PROJECT_ROOT)
    r = run_cli(capsys, *shlex.split(line, comments=True)[1:], "--json")
    assert r.code == 0, f"{line}: {r.out[-400:]} {r.err[-400:]}"
    assert isinstance(r.json(), dict)


def test_the_read_only_examples_are_found():
    """The list above is not empty by accident: each kind of example is in the README."""
    kinds = {k for k in READ_ONLY for c in COMMANDS if c.removeprefix("chamberlab ").startswith(k)}
    assert kinds == set(READ_ONLY)
