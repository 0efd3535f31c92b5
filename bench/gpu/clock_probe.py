"""The highest SM clock nvidia-smi reports while this probe loads the GPU for ~2 s:
run before and after the check, it shows whether a clock lock was left behind."""
import json
import subprocess
import threading
import time

import torch

A = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
stop = threading.Event()


def load():
    while not stop.is_set():
        for _ in range(10):
            A @ A
        torch.cuda.synchronize()


th = threading.Thread(target=load)
th.start()
seen = []
for _ in range(6):
    time.sleep(0.3)
    p = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    if p.returncode == 0 and p.stdout.strip().isdigit():
        seen.append(int(p.stdout.strip()))
stop.set()
th.join()
print(json.dumps({"sm_mhz_under_load": seen, "max": max(seen) if seen else None}))
