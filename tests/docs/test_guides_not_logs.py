"""The docs are guides, not logs: the project's tracker is not part of the
repository, so no page of docs/ cites "issue N" (it says the reason
instead), and the benchmark page keeps current figures, not pass-by-pass
history (that is in bench/results/history.md)."""
import re

ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")


def test_docs_cite_no_issue_numbers(repo):
    hits = [f"{p.name}:{i}: {line.strip()[:100]}"
            for p in sorted((repo / "docs").rglob("*")) if p.is_file()
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
            if ISSUE.search(line)]
    assert hits == []


def test_benchmarks_page_holds_no_pass_history(repo):
    text = (repo / "docs" / "benchmarks.md").read_text()
    assert not re.search(r"\b(first|second|third|fourth|fifth|sixth|nth) (pass|round)\b",
                         text, re.I)
    assert "## How to run" in text and "## Current figures" in text
    assert (repo / "bench" / "results" / "history.md").is_file()
