"""The plugin's module layout (docs/design.md, "The plugin's modules"): no two files of
spank/ call each other, directly or through others, and no header includes itself through
others. Calls are read from the built objects (nm: what each defines and what it needs),
so a call through a macro or a prototype declared by hand counts too; the phase logic's
callbacks are function pointers the glue hands over, not calls. Also: no function of
spank/*.c is over ~80 lines (the project's style rule), read from the source."""
import pathlib
import re
import subprocess

import pytest

MAX_FUNCTION_LINES = 80


def sccs(graph: dict) -> list:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


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
