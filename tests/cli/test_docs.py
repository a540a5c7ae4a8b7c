"""Every `sage` command is documented in docs/cli.md."""

from pathlib import Path

import click

from sage_mcp.cli import cli

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def commands(group: click.Group, prefix: str = "sage"):
    for name, cmd in group.commands.items():
        path = f"{prefix} {name}"
        if isinstance(cmd, click.Group):
            yield from commands(cmd, path)
        else:
            yield path, cmd


def test_every_command_has_a_section_in_the_cli_reference():
    text = DOCS.read_text()
    missing = [path for path, _ in commands(cli) if f"`{path}" not in text]
    assert not missing, f"document these in docs/cli.md: {missing}"


def test_every_command_has_help_text():
    assert [path for path, cmd in commands(cli) if not (cmd.help or "").strip()] == []
