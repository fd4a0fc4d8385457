"""The README's Python snippets run exactly as written, each in a fresh interpreter.

A snippet that stops working (a renamed function, a missing backend start, an import that moved)
fails here with its own output. They run from an empty folder, as a user's script would, so they
find the package through its installation, not through the working directory; `scripts/wheel_check.sh`
runs this file again against the built wheel installed in a fresh venv on Python 3.12 and on 3.13.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_python_snippets():
    assert len(SNIPPETS) >= 6


@pytest.mark.parametrize("index", range(len(SNIPPETS)), ids=lambda i: f"snippet{i + 1}")
def test_readme_snippet_runs_as_written(index, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(SNIPPETS[index])
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, f"README snippet {index + 1}:\n{SNIPPETS[index]}\n{result.stderr[-3000:]}"
    assert result.stdout.strip() or not re.search(r"\bprint\(", SNIPPETS[index])


# --- The README's lists and command lines against the code (parsed only, never run) ---

ROOT = README.parent
NUMBERS = {word: n for n, word in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                                             "nine", "ten", "eleven", "twelve"])}
_APP = re.compile(r"(?:^|\s)(?:\S*/)?(?:python -m app|shannon)(?=\s|$)")  # `python -m app`, `.venv/bin/shannon`, ...
_PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*|\.\.\.")  # COMMAND, NAME, ...: a command line's form, not one to parse


def _readme_command_lines(text: str) -> list[tuple[str, list[str]]]:
    """Every `python -m app ...` (or `shannon ...`) line of the README: in bash blocks and indented blocks (their
    comments cut, continuation lines joined) and in backticks; `[--flag]` in a form kept, `[--flag N]` dropped."""
    lines: list[str] = []
    for line in text.splitlines():
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + " " + line.strip()
        else:
            lines.append(line)
    found, fence = [], None
    for line in lines:
        if line.startswith("```"):
            fence = line[3:] if fence is None else None
        elif fence == "bash" or (fence is None and line.startswith("    ") and not line.lstrip().startswith("-")):
            found.append(line.split(" #")[0].strip())
        elif fence is None:
            found += re.findall(r"`([^`]+)`", line)
    commands = []
    for line in found:
        match = _APP.search(line)
        if match is None:
            continue
        tail = re.sub(r"\[([^\]]*)\]", lambda m: "" if re.search(r"\b[A-Z]+\b", m.group(1)) else m.group(1),
                      line[match.end():])
        argv = shlex.split(tail)
        if not any(_PLACEHOLDER.fullmatch(token) for token in argv):
            commands.append((line, argv))
    return commands


COMMAND_LINES = _readme_command_lines(README.read_text())


def test_the_readme_shows_command_lines_of_every_command():
    shown = {argv[0] for _, argv in COMMAND_LINES if argv and not argv[0].startswith("-")}
    from app import cli

    assert shown == set(cli.SUBCOMMANDS), shown
    assert len(COMMAND_LINES) >= 25


@pytest.mark.parametrize("line, argv", COMMAND_LINES, ids=[" ".join(argv)[:60] for _, argv in COMMAND_LINES])
def test_readme_command_line_parses(line, argv, tmp_path, monkeypatch, capsys):
    """Each command line the README shows is accepted by the parsers the command uses (parsed, not run)."""
    from app.flags import configure_logging
    from tests.cli_parsers import parse_only

    monkeypatch.chdir(tmp_path)
    try:
        if "--help" in argv:
            with pytest.raises(SystemExit) as exit_info:
                parse_only(argv)
            assert exit_info.value.code == 0, line
        else:
            parse_only(argv)  # a UserError (one `error:` line for the user) fails the test with its message
    finally:
        configure_logging(0)


def test_readme_lists_the_commands():
    from app import cli

    listed = re.search(r"and the commands\s+\(([^)]*)\)", README.read_text())
    assert listed, "the README's list of commands (`python -m app --help` ... and the commands (`...`)) is gone"
    assert re.findall(r"`([^`]+)`", listed.group(1)) == list(cli.SUBCOMMANDS)


def test_readme_lists_the_examples():
    text = " ".join(README.read_text().split())
    listed = re.search(r"(\w+) short programs in `examples/`, one per capability \(([^)]*)\)", text)
    assert listed, "the README's list of examples is gone"
    files = sorted(path.stem for path in (ROOT / "examples").glob("*.py"))
    assert sorted(re.findall(r"`([^`]+)`", listed.group(2))) == files
    assert NUMBERS[listed.group(1).lower()] == len(files), listed.group(0)


def test_readme_lists_the_panels():
    from app.ui.state import PANELS
    from app.ui.app import WINDOW_TITLES

    text = " ".join(README.read_text().split())
    assert re.findall(r"`--panel ([a-z|]+)`", text) == ["|".join(PANELS)]
    count = re.search(r"(\w+) docked panels", text)
    assert count and NUMBERS[count.group(1).lower()] == len(PANELS) == len(WINDOW_TITLES)
    for name in PANELS:  # each panel has its bullet, under its window title
        assert f"- **{WINDOW_TITLES[name]}**:" in README.read_text(), WINDOW_TITLES[name]


def test_every_readme_picture_is_made_by_the_script(tmp_path, monkeypatch):
    """The README's pictures are regenerated, never hand-edited: each one it shows from docs/pictures/ is one that
    scripts/readme_pictures.py makes, docs/pictures/ holds exactly those, small; each command parses (not run)."""
    import importlib.util

    from app.flags import configure_logging
    from tests.cli_parsers import parse_only

    spec = importlib.util.spec_from_file_location("readme_pictures", ROOT / "scripts" / "readme_pictures.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    shown = re.findall(r"\]\(docs/pictures/([^)]+)\)", README.read_text())
    assert sorted(shown) == sorted(script.COMMANDS) == sorted(script.CUT)
    files = list((ROOT / "docs" / "pictures").iterdir())
    assert sorted(path.name for path in files) == sorted(script.COMMANDS)
    assert sum(path.stat().st_size for path in files) < 600 * 1024
    monkeypatch.chdir(tmp_path)
    try:
        for argv in script.COMMANDS.values():
            parse_only([arg.replace("OUT", str(tmp_path)) for arg in argv])
    finally:
        configure_logging(0)
