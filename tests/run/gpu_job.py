"""A command for joulestep-run --gpus --phases on fake GPUs (tests/fakehw/fakegpu.py).

    gpu_job.py ROOT OUT.json STEP...

Each STEP is begin:KIND[:LABEL] | end | load:GPU:UTIL | reset:GPU | sleep:SECONDS |
locks (record the fake GPUs' lock lines now). OUT.json gets the CLOCK_MONOTONIC
time at which each marker was written, so that the test can compute each phase's
true energy from the model.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fakehw"))
import fakegpu  # noqa: E402


def main(root, out, steps):
    fd = int(os.environ["JOULESTEP_RUN_MARK_FD"])
    log = {"markers": [], "locks_seen": []}
    for step in steps:
        verb, *args = step.split(":")
        if verb in ("begin", "end"):
            t = time.monotonic_ns()
            line = " ".join([verb] + args + [f"t={t}"]) + "\n"
            log["markers"].append([verb, args, t])
            os.write(fd, line.encode())
        elif verb == "load":
            fakegpu.load(root, int(args[0]), float(args[1]))
        elif verb == "reset":
            fakegpu.reset(root, int(args[0]))
        elif verb == "sleep":
            time.sleep(float(args[0]))
        elif verb == "locks":
            n = len([d for d in os.listdir(root) if d.startswith("gpu")])
            log["locks_seen"].append([fakegpu.locks(root, i) for i in range(n)])
        elif verb == "raw":  # a line as is (bad input tests)
            os.write(fd, (":".join(args) + "\n").encode())
    with open(out, "w") as f:
        json.dump(log, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
