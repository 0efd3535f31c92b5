"""The plugin's module layout (docs/design.md, "The plugin's modules"): no two files of
spank/ call each other, directly or through others, and no header includes itself through
others. Calls are read from the built objects (nm: what each defines and what it needs),
so a call through a macro or a prototype declared by hand counts too; the phase logic's
callbacks are function pointers the glue hands over, not calls. Also: no function of
spank/*.c is over ~80 lines (the project's style rule), read from the source."""
import importlib.util
import pathlib
import re
import subprocess

import pytest

MAX_FUNCTION_LINES = 80


def _cycles():
    """The CLI's import-cycle finder (tests/cli/test_imports.py, Tarjan's
    strongly connected components of more than one node): one graph rule
    for both halves of the project."""
    path = pathlib.Path(__file__).resolve().parents[1] / "cli" / "test_imports.py"
    spec = importlib.util.spec_from_file_location("_joulestep_test_imports", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cycles


_CYCLES = _cycles()


def sccs(graph: dict) -> list:
    """Cycles of a graph whose edges may name nodes without edges of their own."""
    full = {v: set(ws) for v, ws in graph.items()}
    for ws in graph.values():
        for w in ws:
            full.setdefault(w, set())
    return _CYCLES(full)


def symbols(obj: pathlib.Path) -> tuple:
    """(defined global functions, undefined symbols) of one object file."""
    out = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    defined, needed = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "T":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            needed.add(parts[1])
    return defined, needed


def call_graph(repo: pathlib.Path, build_dir: pathlib.Path) -> dict:
    objs = {}
    for src in sorted((repo / "spank").glob("*.c")):
        obj = build_dir / "obj" / "spank" / (src.stem + ".o")
        if not obj.exists() or obj.stat().st_mtime < src.stat().st_mtime:
            pytest.fail(f"{obj} missing or older than {src.name}: run make")
        objs[src.name] = symbols(obj)
    owner = {sym: name for name, (defs, _) in objs.items() for sym in defs}
    return {name: {owner[s] for s in need if s in owner and owner[s] != name}
            for name, (_, need) in objs.items()}


def test_sccs_finds_a_cycle():
    assert sccs({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert sccs({"a": {"b"}, "b": set()}) == []


def test_no_two_plugin_files_call_each_other(repo, build_dir):
    graph = call_graph(repo, build_dir)
    assert "joulestep.c" in graph and len(graph) > 10
    assert sccs(graph) == []
    # the SPANK glue is called by nobody: every module can be used without it
    assert not [n for n, calls in graph.items() if "joulestep.c" in calls]


def test_no_include_cycle(repo):
    graph = {}
    for f in sorted((repo / "spank").glob("*.[ch]")):
        graph[f.name] = set(re.findall(r'^#include "([^"/]+)"', f.read_text(), re.M))
    assert sccs(graph) == []


def functions(text: str):
    """(name, lines) of each top-level function: a signature at column 0 whose body
    opens with { at column 0 and closes with } at column 0."""
    for m in re.finditer(r"^[A-Za-z_][^\n;]*?\b(\w+)\([^;{]*?\)\s*\n\{\n", text, re.M):
        end = text.index("\n}\n", m.end())
        yield m.group(1), text.count("\n", m.start(), end) + 2


def test_functions_are_short(repo):
    found = {f"{src.name}:{name}": n for src in sorted((repo / "spank").glob("*.c"))
             for name, n in functions(src.read_text())}
    assert len(found) > 100
    assert {k: n for k, n in found.items() if n > MAX_FUNCTION_LINES} == {}
