"""No import cycle among joulestep's modules (docs/design.md, "One record
schema, one checker"): every import, at module level or inside a function,
read from the source with ast.  Store and lost once imported each
other, and so did report and whatif."""
import ast
import pathlib

import joulestep

PKG = pathlib.Path(joulestep.__file__).resolve().parent


def modules() -> dict:
    """dotted name -> path of every module of the package."""
    out = {}
    for f in PKG.rglob("*.py"):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imports(name: str, path: pathlib.Path, known: set) -> set:
    """The joulestep modules one module imports."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:        # from X import submodule, or names of X
                sub = f"{mod}.{a.name}"
                out.add(sub if sub in known else mod)
    return {m for m in out if m in known and m != name}


def cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_imports():
    """The parser finds known edges (else an empty graph passes)."""
    mods = modules()
    graph = {m: imports(m, p, set(mods)) for m, p in mods.items()}
    assert "joulestep.store.records" in graph["joulestep.store.ingest"]
    assert "joulestep.store.db" in graph["joulestep.store.engines"]
    assert "joulestep.report" in graph["joulestep.whatif"]
    assert "joulestep.whatif" in graph["joulestep.jobsummary"]
    assert "joulestep.options" in graph["joulestep.commands.job"]


def test_no_import_cycle():
    mods = modules()
    graph = {m: imports(m, p, set(mods)) for m, p in mods.items()}
    assert cycles(graph) == []
    # and the checker finds one when there is one
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


def test_functions_are_short():
    """One concern per module, no function over ~80 lines, in the whole CLI
    (the store was one 1,900-line module with a 200-line checker; the job
    summary one 214-line function)."""
    long = []
    for f in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.end_lineno - node.lineno >= 80:
                long.append(f"{f.relative_to(PKG)}:{node.name}")
    assert not long, long


def test_no_command_imports_the_root_group():
    """Commands import the context and the options from options.py, never
    cli.py (which loads them: that was a cycle, worked around by a module
    of its own for the ingest run)."""
    mods = modules()
    graph = {m: imports(m, p, set(mods)) for m, p in mods.items()}
    bad = [m for m in graph if m.startswith("joulestep.commands.")
           and "joulestep.cli" in graph[m]]
    assert not bad, bad
    assert "joulestep.cli" not in graph["joulestep.options"]
    assert "joulestep.spoolrun" not in mods


def test_read_queries_live_in_the_store():
    """Every SQL query of the CLI is in the store package (store/): the
    read side in store/read_*.py, next to the engines and ingest."""
    outside = sorted(str(f.relative_to(PKG)) for f in PKG.rglob("*.py")
                     if f.relative_to(PKG).parts[0] != "store"
                     and "SELECT" in f.read_text())
    assert not outside, outside
    assert "SELECT" in (PKG / "store" / "read_jobs.py").read_text()


def test_commands_call_no_private_helper_of_another_module():
    """A command calls other modules' public functions only (`x._name`)."""
    bad = []
    for f in (PKG / "commands").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") \
                    and isinstance(node.value, ast.Name) and node.value.id != "self":
                bad.append(f"{f.name}: {node.value.id}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.level and any(
                    a.name.startswith("_") for a in node.names):
                bad.append(f"{f.name}: from {node.module} import "
                           + ", ".join(a.name for a in node.names))
    assert not bad, bad
