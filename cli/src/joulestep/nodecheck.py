"""`joulestep doctor --node`: is the plugin enabled on this node, with a
configuration it accepts?

Reads the plugstack.conf this node's Slurm uses (slurm.conf's
PlugStackConfig, default plugstack.conf beside slurm.conf; `include` globs
followed), finds the lines naming joulestep.so, and has each line's
arguments judged by the plugin's own parser: joulestep-plugstack-check
(spank/tools/, js_conf_parse of spank/js_parse.c; package joulestep-spank).
A refused line switches the plugin off on the node while jobs run on,
unmeasured (the line is `optional`): that is the loud failure this check is
for.  Plugstack syntax: plugstack.conf(5) ("required|optional PLUGIN
[ARGS]", "include GLOB", "#" comments).
"""
from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess

MAX_INCLUDE_DEPTH = 8
CHECK_TIMEOUT_S = 30


def slurm_plugstack(slurm_conf: str | None = None) -> pathlib.Path:
    """The plugstack.conf slurmd reads: PlugStackConfig in slurm.conf
    ($SLURM_CONF, else /etc/slurm/slurm.conf), else plugstack.conf in
    slurm.conf's directory."""
    conf = pathlib.Path(slurm_conf or os.environ.get("SLURM_CONF")
                        or "/etc/slurm/slurm.conf")
    try:
        text = conf.read_text()
    except OSError:
        text = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        key, eq, val = line.partition("=")
        if eq and key.strip().lower() == "plugstackconfig" and val.strip():
            return pathlib.Path(val.strip())
    return conf.parent / "plugstack.conf"


def joulestep_lines(path: pathlib.Path, problems: list, depth: int = 0) -> list[dict]:
    """The lines naming joulestep.so in ``path`` and the files it includes:
    {file, line, mode, plugin, args}."""
    try:
        text = path.read_text()
    except OSError as e:
        problems.append(f"cannot read {path}: {e.strerror or e}")
        return []
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "include" and len(words) >= 2:
            if depth >= MAX_INCLUDE_DEPTH:
                problems.append(f"{path}:{n}: includes nested deeper than "
                                f"{MAX_INCLUDE_DEPTH}")
                continue
            pat = words[1] if os.path.isabs(words[1]) else str(path.parent / words[1])
            for f in sorted(glob.glob(pat)):
                out += joulestep_lines(pathlib.Path(f), problems, depth + 1)
        elif (words[0] in ("required", "optional") and len(words) >= 2
              and os.path.basename(words[1]) == "joulestep.so"):
            out.append({"file": str(path), "line": n, "mode": words[0],
                        "plugin": words[1], "args": words[2:]})
    return out


def checker_path() -> str | None:
    return (os.environ.get("JOULESTEP_PLUGSTACK_CHECK")
            or shutil.which("joulestep-plugstack-check"))


def check(path: pathlib.Path | None = None) -> dict:
    """{plugstack, lines: [{file, line, mode, plugin, plugin_exists, args,
    accepted, message}], problems}; no problems: the plugin is enabled,
    once, with a configuration it accepts."""
    path = pathlib.Path(path) if path else slurm_plugstack()
    problems: list[str] = []
    lines = joulestep_lines(path, problems)
    exe = checker_path()
    if not lines and not problems:
        problems.append(f"joulestep.so is not in {path} (nor in the files it "
                        "includes): the plugin does not run on this node")
    if len(lines) > 1:
        problems.append(f"joulestep.so is named {len(lines)} times: Slurm would "
                        "load it more than once")
    if lines and not exe:
        problems.append("joulestep-plugstack-check not found (package "
                        "joulestep-spank): cannot tell whether the plugin "
                        "accepts its arguments")
    for d in lines:
        where = f"{d['file']}:{d['line']}"
        d["plugin_exists"] = (os.path.isfile(d["plugin"])
                              if os.path.isabs(d["plugin"]) else None)
        if d["plugin_exists"] is False:
            problems.append(f"{where}: {d['plugin']} does not exist: the plugin "
                            "does not run on this node")
        d["accepted"], d["message"] = None, None
        if exe:
            res = subprocess.run([exe, "--", *d["args"]], capture_output=True,
                                 text=True, timeout=CHECK_TIMEOUT_S)
            d["accepted"] = res.returncode == 0
            d["message"] = (res.stdout if d["accepted"] else res.stderr).strip()
            if not d["accepted"]:
                problems.append(f"{where}: {d['message']}: every job on this "
                                "node runs unmeasured")
    return {"plugstack": str(path), "lines": lines, "problems": problems}
