"""The manual pages (issue 25, point 11): every page renders without a
warning, every joulestep page a SEE ALSO names exists, and each page says
what its program really takes: joulestep(1) every click command and option,
joulestep-phase(1) and joulestep-restore(8) what the tools' usage texts
list. So none of them can drift from the code."""
import re
import shutil
import subprocess

import click
import pytest

from joulestep.cli import cli

PAGE = re.compile(r".+\.[1-8]")


def pages(repo):
    return sorted(p for p in (repo / "docs").iterdir() if PAGE.fullmatch(p.name))


def plain(troff: str) -> str:
    """Roff source as text: font escapes dropped, \\- as -."""
    t = re.sub(r"\\f[BIRP]|\\&", "", troff)
    return t.replace("\\-", "-")


def need(tool):
    if not shutil.which(tool):
        pytest.fail(f"{tool} is missing: run `make deps` (groff-base, man-db)")


def test_the_pages_are_there(repo):
    assert {p.name for p in pages(repo)} >= {
        "joulestep.1", "joulestep-phase.1", "joulestep-restore.8", "joulestep-spank.8"}


@pytest.mark.parametrize("name", ["joulestep.1", "joulestep-phase.1", "joulestep-restore.8",
                                  "joulestep-spank.8"])
def test_page_renders_without_warnings(repo, name):
    need("groff")
    need("man")
    need("lexgrog")
    page = repo / "docs" / name
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # what man(1) shows, through its own preprocessing, and the NAME line
    # that whatis/apropos index
    r = subprocess.run(["man", "--warnings", "-l", "-Tutf8", str(page)], capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "MANWIDTH": "80"})
    assert r.returncode == 0 and r.stderr == "", r.stderr
    r = subprocess.run(["lexgrog", str(page)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    th = re.search(r"^\.TH\s+(\S+)\s+(\d)", page.read_text(), re.M)
    assert th and (th.group(1).lower(), th.group(2)) == tuple(name.rsplit(".", 1))


def test_see_also_names_pages_that_exist(repo):
    ours = {p.name for p in pages(repo)}
    missing = []
    for p in pages(repo):
        see = plain(p.read_text()).split(".SH SEE ALSO", 1)[1]
        for name, sec in re.findall(r"\.BR\s+(joulestep[\w-]*)\s+\((\d)\)", see):
            if f"{name}.{sec}" not in ours:
                missing.append(f"{p.name}: {name}({sec})")
    assert missing == []


def test_see_also_parser_finds_references(repo):
    see = plain((repo / "docs" / "joulestep.1").read_text()).split(".SH SEE ALSO", 1)[1]
    assert ("joulestep-restore", "8") in re.findall(r"\.BR\s+(joulestep[\w-]*)\s+\((\d)\)", see)


# ---- joulestep(1) against the click commands ----------------------------------------

def _commands(group, prefix=()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield prefix + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))


def _sections(text: str) -> dict:
    """'.SS "joulestep job [OPTIONS] JOBID"' -> {("job",): section text}."""
    out = {}
    parts = re.split(r"^\.SS\s+\"?joulestep ([^\"\n]*)\"?\n", text, flags=re.M)
    for head, body in zip(parts[1::2], parts[2::2]):
        words = tuple(w for w in head.split() if re.fullmatch(r"[a-z][a-z-]*", w))
        out[words] = body.split("\n.SH ", 1)[0]
    return out


def _tagged_options(section: str) -> set:
    """The options a section documents: those on the tag line after each .TP."""
    tags = re.findall(r"^\.TP\n(.*)$", section, re.M)
    return {o for t in tags for o in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", t)}


def _man_sections(repo):
    return _sections(plain((repo / "docs" / "joulestep.1").read_text()))


def _click_options(cmd):
    return {o for p in cmd.params if isinstance(p, click.Option) and not p.hidden
            for o in p.opts + p.secondary_opts}


ALL = [(p, c) for p, c in _commands(cli) if not isinstance(c, click.Group)]


@pytest.mark.parametrize("path,cmd", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_joulestep_1_documents_every_command_and_option(repo, path, cmd):
    sections = _man_sections(repo)
    assert path in sections, \
        f'docs/joulestep.1 has no .SS "joulestep {" ".join(path)} ..." section'
    assert _tagged_options(sections[path]) == _click_options(cmd)
    # the arguments, in the heading's order
    args = [p.name.upper() for p in cmd.params if isinstance(p, click.Argument)]
    head = re.search(r"^\.SS\s+\"?joulestep " + " ".join(path) + r"\b([^\"\n]*)",
                     plain((repo / "docs" / "joulestep.1").read_text()), re.M).group(1)
    assert re.findall(r"\b[A-Z]{2,}\b(?<!OPTIONS)", head) == args


def test_joulestep_1_names_no_command_that_is_gone(repo):
    real = {p for p, c in _commands(cli)}
    assert set(_man_sections(repo)) <= real


def test_joulestep_1_global_options(repo):
    text = plain((repo / "docs" / "joulestep.1").read_text())
    glob = text.split(".SH GLOBAL OPTIONS", 1)[1].split("\n.SH ", 1)[0]
    assert _tagged_options(glob) == _click_options(cli)


def test_the_drift_check_sees_a_missing_option(repo):
    sections = _man_sections(repo)
    doc = _tagged_options(sections[("job",)])
    assert "--tuned" in doc and "--nonexistent" not in doc
    assert _tagged_options(".TP\n.BI --a \" X, \" --b-c \" Y\"\ntext --not-this\n") == \
        {"--a", "--b-c"}


# ---- the C tools against their usage texts ------------------------------------------

def _usage_options(argv) -> set:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", r.stdout + r.stderr))


def test_joulestep_restore_8_matches_the_tool(repo, build_dir):
    tool = _usage_options([str(build_dir / "bin" / "joulestep-restore"), "--help"])
    page = plain((repo / "docs" / "joulestep-restore.8").read_text())
    opts = page.split(".SH OPTIONS", 1)[1].split("\n.SH ", 1)[0]
    assert tool and _tagged_options(opts) == tool | {"--help"}


def test_joulestep_phase_1_matches_the_tool(repo, build_dir):
    tool = _usage_options([str(build_dir / "bin" / "joulestep-phase")])   # usage, exit 2
    page = plain((repo / "docs" / "joulestep-phase.1").read_text())
    synopsis = page.split(".SH SYNOPSIS", 1)[1].split("\n.SH ", 1)[0]
    documented = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", synopsis))
    assert tool and documented == tool
    for sub in ("begin", "end", "ping"):
        assert re.search(rf"^\.B {sub}\b", synopsis, re.M), sub
