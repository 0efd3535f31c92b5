"""Every command has help text and an entry in docs/cli.md."""
import click
import pytest
from click.testing import CliRunner

from joulestep.cli import cli


def _commands(group, prefix=()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        path = prefix + (name,)
        yield path, cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, path)


ALL = list(_commands(cli))


def test_there_are_commands():
    names = {" ".join(p) for p, _ in ALL}
    assert {"ingest", "job", "report", "compare", "model damaris", "model dvfs",
            "tune", "plot", "export", "doctor", "restore", "phase begin",
            "phase end"} <= names


@pytest.mark.parametrize("path,cmd", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_help_text(path, cmd):
    assert (cmd.help or "").strip(), f"joulestep {' '.join(path)} has no help text"
    r = CliRunner().invoke(cli, [*path, "--help"])
    assert r.exit_code == 0 and "Usage:" in r.output
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.hidden:
            assert p.help, f"joulestep {' '.join(path)} {p.opts[0]} has no help"


@pytest.mark.parametrize("path,cmd", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_documented(repo, path, cmd):
    doc = (repo / "docs" / "cli.md").read_text()
    heading = f"### joulestep {' '.join(path)}"
    assert heading in doc.splitlines() or f"## joulestep {' '.join(path)}" in \
        doc.splitlines(), f"docs/cli.md lacks a '{heading}' section"
