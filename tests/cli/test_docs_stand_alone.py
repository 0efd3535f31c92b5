"""The docs and --help texts stand alone (issue 25, point 10): they point to
nothing outside the repository (../shared/, /work/...), name papers by author
and year, not by a file number of a reference set ("paper 000"), and every
paper they name has its full citation in docs/science.md."""
import re

import pytest
from click.testing import CliRunner

from joulestep.cli import COMMANDS, cli

OUTSIDE = re.compile(r"\.\./shared|(?:^|[\s`(])/work/|reference\.md|seeds/|[Pp]aper 00\d|\bsec\. \d", re.M)


def user_texts(repo):
    for p in [repo / "README.md", *sorted((repo / "docs").glob("*.md")),
              *sorted((repo / "docs").glob("*.[1-8]"))]:
        yield p.name, p.read_text()
    runner = CliRunner()
    yield "--help", runner.invoke(cli, ["--help"]).output
    for c in COMMANDS:
        res = runner.invoke(cli, [c, "--help"])
        yield f"{c} --help", res.output
        for sub in re.findall(r"^  (\w[\w-]*)\s", res.output.split("Commands:")[-1], re.M) \
                if "Commands:" in res.output else []:
            yield f"{c} {sub} --help", runner.invoke(cli, [c, sub, "--help"]).output


def test_nothing_points_outside_the_repository(repo):
    bad = [(name, m.group(0)) for name, text in user_texts(repo)
           for m in OUTSIDE.finditer(text)]
    assert bad == []


@pytest.mark.parametrize("author", ["Wilkins 2023", "Wilkins et al. 2022",
                                    "Dorier et al. 2016", "Yildiz et al. 2014",
                                    "Mills et al. 2013", "Lipp et al. 2021"])
def test_every_paper_cited_in_full(repo, author):
    science = (repo / "docs" / "science.md").read_text()
    row = next(l for l in science.splitlines() if l.startswith(f"| {author} |"))
    full = row.split("|")[2]
    assert re.search(r"\b(19|20)\d\d\b", full) and "*" in full   # a year and a title
