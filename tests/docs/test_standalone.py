"""The repository's docs stand alone (issue 25, point 10): no file points
outside the clone (../shared, reference.md, absolute paths of the machine
it was written on), the code cites papers only by author and year (the
full citations are in docs/science.md), and every link between the docs
resolves, to a file and, where it names one, to a heading."""
import pathlib
import re
import subprocess

import pytest

# Outside the repository: the read-only reference the project was built from,
# and absolute paths of the development machine.
OUTSIDE = re.compile(r"\.\./shared\b|\bshared/(reference|seeds)\b|reference\.md|"
                     r"(?<![\w.~$/-])/work/")
# The papers' file numbers mean nothing in a clone (tests may keep them in notes).
PAPER_NUMBER = re.compile(r"\b[Pp]apers? 00[0-4]\b|\bseeds/00[0-4]")
MD_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w.-]+\.(?:md|[1-8])\b")
# This file names the patterns it forbids.
SELF = pathlib.Path(__file__).resolve()


def _files(repo):
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo,
                         capture_output=True, check=True).stdout
    for name in out.decode().split("\0"):
        p = repo / name
        if name and p.is_file() and not p.is_symlink() and p.resolve() != SELF:
            try:
                yield name, p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # binary


def _hits(repo, pattern, skip=lambda name: False):
    return [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for name, text in _files(repo) if not skip(name)
            for m in pattern.finditer(text)]


# The one pointer outside the clone that is meant (issue 22): the Makefile's default
# IOLIBS_SRC, the development machines' archive directory, used only where it exists.
MEANT_OUTSIDE = ("Makefile", "IOLIBS_SRC ?= ")


def test_no_file_points_outside_the_repository(repo):
    name, prefix = MEANT_OUTSIDE
    meant = [line for line in (repo / name).read_text().splitlines() if line.startswith(prefix)]
    assert len(meant) == 1, meant
    hits = _hits(repo, OUTSIDE)
    line_no = (repo / name).read_text().splitlines().index(meant[0]) + 1
    assert [h for h in hits if not h.startswith(f"{name}:{line_no}: ")] == []


def test_papers_are_cited_by_author_not_by_file_number(repo):
    assert _hits(repo, PAPER_NUMBER, skip=lambda n: n.startswith("tests/")) == []


def test_the_patterns_catch_what_they_should():
    for bad in ("see ../shared/reference.md §3", "in reference.md", "/work/shared/x",
                "/work/main/.venv/bin/python", "`seeds/002`"):
        assert OUTSIDE.search(bad) or PAPER_NUMBER.search(bad), bad
    for ok in ("build/fuzz/work/<target>/", "$B/fuzz/work/$t", "docs/science.md"):
        assert not OUTSIDE.search(ok), ok
    assert PAPER_NUMBER.search("(paper 002 §3.2)")
    assert not PAPER_NUMBER.search("migration 002 rebuilds jobs")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped,
    spaces to hyphens."""
    h = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(text: str) -> set:
    seen, out = {}, set()
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_slug_follows_github():
    assert slug("1. Measuring energy: RAPL through powercap") == \
        "1-measuring-energy-rapl-through-powercap"
    assert slug("`joulestep job` — what-if") == "joulestep-job--what-if"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def _md_links(repo):
    for name, text in _files(repo):
        if name.endswith(".md"):
            for m in MD_LINK.finditer(text):
                target = m.group(1).strip("<>")
                if re.match(r"[a-z][a-z0-9+.-]*:", target):   # http:, mailto:, ...
                    continue
                yield name, text.count("\n", 0, m.start()) + 1, target


def test_markdown_links_resolve(repo):
    links = list(_md_links(repo))
    assert len(links) > 20          # the docs do link to each other
    bad = []
    for name, line, target in links:
        path, _, frag = target.partition("#")
        dest = (repo / name).parent / path if path else repo / name
        where = f"{name}:{line}: ({target})"
        if not dest.resolve().is_relative_to(repo.resolve()):
            bad.append(f"{where} leaves the repository")
        elif not dest.exists():
            bad.append(f"{where} no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest.read_text()):
            bad.append(f"{where} no heading #{frag}")
    assert bad == []


def test_docs_paths_named_in_files_exist(repo):
    """`docs/user-guide.md`, `docs/joulestep.1`: every docs/ file any file
    names (in prose, comments, help texts) is there."""
    missing = [f"{name}: {m.group(0)}" for name, text in _files(repo)
               for m in DOCS_PATH.finditer(text) if not (repo / m.group(0)).is_file()]
    assert missing == []


@pytest.mark.parametrize("key", ["Wilkins 2023", "Wilkins 2022", "Dorier 2016",
                                 "Mills 2013", "Yildiz 2014"])
def test_every_cited_paper_has_its_full_citation(repo, key):
    science = (repo / "docs" / "science.md").read_text()
    refs = science.split("## References", 1)[1]
    entry = re.search(r"\*\*\[" + key + r"\]\*\*(.*?)(?=\n- \*\*|\Z)", refs, re.S)
    assert entry, f"docs/science.md has no reference entry for [{key}]"
    text = " ".join(entry.group(1).split())
    assert key.split()[1] in text                       # the year
    assert key.split()[0] in text                       # the first author
    assert re.search(r"[\"*][A-Z][^\"*]{15,}[\"*]", text)  # a quoted or italic title


# `docs/cli.md, "Start-up"`, `docs/phase-protocol.md ("Collective phases"`: a
# section named in quotes after a docs path.
SECTION_REF = re.compile(r"docs/([\w-]+\.md),?\s+\(?\"([^\"\n]+)\"")


def _titles(path) -> list:
    """Headings, and the bold labels paragraphs and list items start with."""
    text = path.read_text(encoding="utf-8")
    heads = [re.sub(r"^#+\s*", "", line).strip()
             for line in text.splitlines() if re.match(r"#{1,6}\s", line)]
    bold = re.findall(r"^(?:[-*]\s+)?\*\*([^*\n]+)", text, re.M)
    return heads + [b.strip() for b in bold]


def test_sections_named_in_quotes_exist(repo):
    refs, bad = 0, []
    titles = {}
    for name, text in _files(repo):
        for m in SECTION_REF.finditer(text):
            refs += 1
            doc, title = m.groups()
            path = repo / "docs" / doc
            if not path.is_file():
                bad.append(f"{name}: {m.group(0)} (no such file)")
                continue
            t = titles.setdefault(doc, _titles(path))
            if not any(h.startswith(title) or title in h for h in t):
                bad.append(f"{name}: {m.group(0)}")
    assert refs > 50
    assert bad == []


GUIDES = ("cli.md", "user-guide.md", "admin-guide.md")


@pytest.mark.parametrize("guide", GUIDES)
def test_guides_hold_no_benchmark_logs(repo, guide):
    """Benchmark history lives in docs/benchmarks.md (issue 25, point 12)."""
    log = re.compile(r"\(p99\b|\(goal [<>]=|\bsteps/s\b|\bbaseline\b.*\bratio \d")
    lines = [f"{guide}:{i}: {line}" for i, line in
             enumerate((repo / "docs" / guide).read_text().splitlines(), 1) if log.search(line)]
    assert lines == []
