"""Truths from the repository for the package tests: what every package set must ship."""
import pathlib
import re
import tomllib

REPO = pathlib.Path(__file__).resolve().parents[2]


def pyproject() -> dict:
    return tomllib.loads((REPO / "cli" / "pyproject.toml").read_text())


def repo_docs() -> set:
    """The guides (docs/*.md) every package set must ship."""
    return {p.name for p in (REPO / "docs").glob("*.md")}


def repo_manpages() -> set:
    return {p.name for p in (REPO / "docs").iterdir() if re.fullmatch(r".+\.[1-8]", p.name)}


def repo_hooks() -> set:
    """File names of the --energy-hooks libraries: one per spank/hooks/<name>.map."""
    return {f"libjoulestep-{p.stem}.so" for p in (REPO / "spank" / "hooks").glob("*.map")}


def hooks_dir_for(plugin: str) -> str:
    """Where an installed plugin looks for the hook libraries without hooks_dir=:
    <directory of joulestep.so>/../joulestep (docs/admin-guide.md, "Phase hooks")."""
    return str(pathlib.PurePosixPath(plugin).parent.parent / "joulestep")


def repo_migrations() -> dict:
    """relative path under sql/ -> bytes, for every migration file."""
    root = REPO / "sql"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.sql")}


def requirement_names() -> list:
    """Distribution names of the CLI's run-time requirements, normalised (PEP 503)."""
    return [re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", r).group(0)).lower()
            for r in pyproject()["project"]["dependencies"]]
