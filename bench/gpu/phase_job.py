"""The device check's GPU job, run under joulestep-run --gpus --phases.

    phase_job.py load10 OUT.json          10 s of matrix products in one phase, with the
                                          script's own NVML power samples around it
    phase_job.py phases OUT.json          5 x (compute 1 s, checkpoint = torch.save of
                                          1 GiB of GPU tensors to /dev/shm + fsync)
    phase_job.py phases-verify OUT.json   the same, then a `write` phase with load in
                                          which nvidia-smi reads the SM clock

Markers go to $JOULESTEP_RUN_MARK_FD with the job's own CLOCK_MONOTONIC time.
Without CUDA (JS_DEVCHECK_CPU=1: a dry run of the script on a machine without a GPU)
numpy stands in for torch.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from nvml_sampler import Sampler  # noqa: E402

CPU = os.environ.get("JS_DEVCHECK_CPU") == "1"
FD = int(os.environ["JOULESTEP_RUN_MARK_FD"])
MARKS = []


def mark(*words):
    t = time.monotonic_ns()
    MARKS.append([list(words), t])
    os.write(FD, (" ".join(words) + f" t={t}\n").encode())
    return t


if CPU:
    import numpy as np
    import pickle

    def matmuls(seconds):
        a = np.ones((256, 256), dtype=np.float32)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            a @ a

    def make_state():
        return {"w": np.ones(16 * 1024 * 1024, dtype=np.float32)}

    def save(state, path):
        with open(path, "wb") as f:
            pickle.dump(state, f)
else:
    import torch

    A = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def matmuls(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(10):
                A @ A
            torch.cuda.synchronize()

    def make_state():  # 1 GiB of float32 on the GPU, as a model's weights
        return {f"layer{i}": torch.randn(64 * 1024 * 1024, device="cuda") for i in range(4)}

    def save(state, path):
        torch.save(state, path)


def checkpoint(state, path):
    save(state, path)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.unlink(path)


def load10(out):
    s = Sampler().start()
    matmuls(2.0)  # warm: NVML's averaged power reaches the load level first
    t0 = mark("begin", "compute", "load10")
    matmuls(10.0)
    t1 = mark("end")
    matmuls(1.5)  # and stays there past the end
    s.stop()
    res = {"t0": t0, "t1": t1, "script_power_usage_j": s.integrate(t0, t1, 1),
           "script_instant_j": s.integrate(t0, t1, 2) if s.instant_ok else None,
           "samples": len(s.samples), "instant_field": s.instant_ok}
    json.dump({"marks": MARKS, **res}, open(out, "w"))


def smi_clock():
    q = "clocks.sm,clocks.max.sm,clocks_event_reasons.active"
    p = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                       capture_output=True, text=True)
    if p.returncode:  # older drivers name it clocks_throttle_reasons
        p = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True)
    return (p.stdout or p.stderr).strip()


def phases(out, verify):
    state = make_state()
    path = f"/dev/shm/js_devcheck_{os.getpid()}.pt"
    res = {"smi_during_write": None}
    for r in range(5):
        mark("begin", "compute", f"c{r}")
        matmuls(1.0)
        mark("end")
        mark("begin", "checkpoint", f"k{r}")
        checkpoint(state, path)
        mark("end")
    if verify and not CPU:
        import threading
        mark("begin", "write", "verify")
        th = threading.Thread(target=matmuls, args=(1.5,))
        th.start()
        time.sleep(0.7)
        res["smi_during_write"] = smi_clock()
        th.join()
        mark("end")
    json.dump({"marks": MARKS, **res}, open(out, "w"))


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "load10":
        load10(out)
    else:
        phases(out, mode == "phases-verify")
