"""The device check's own view of the GPU: NVML's power readings, through ctypes,
independent of joulestep's C code. A thread samples nvmlDeviceGetPowerUsage (and
the instantaneous power field where the driver has it) every few ms; integrate()
gives the energy between two CLOCK_MONOTONIC times by the trapezoid rule."""
import ctypes
import threading
import time

NVML_FI_DEV_POWER_INSTANT = 186  # nvml.h field id (newer drivers)


class FieldValue(ctypes.Structure):  # nvmlFieldValue_t
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint),
                ("timestamp", ctypes.c_longlong), ("latencyUsec", ctypes.c_longlong),
                ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", ctypes.c_ulonglong)]


class Sampler:
    def __init__(self, index=0, period_s=0.005, lib="libnvidia-ml.so.1"):
        self.nvml = ctypes.CDLL(lib)
        if self.nvml.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit failed")
        self.dev = ctypes.c_void_p()
        if self.nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.dev)) != 0:
            raise RuntimeError(f"no GPU {index}")
        self.period_s = period_s
        self.samples = []  # (t_ns, power_mw, instant_mw or None)
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._loop, daemon=True)
        self.instant_ok = self._instant() is not None

    def _instant(self):
        fv = FieldValue(fieldId=NVML_FI_DEV_POWER_INSTANT)
        try:
            rc = self.nvml.nvmlDeviceGetFieldValues(self.dev, 1, ctypes.byref(fv))
        except AttributeError:
            return None
        if rc != 0 or fv.nvmlReturn != 0:
            return None
        return fv.value & 0xFFFFFFFF  # valueType: unsigned int, mW

    def _loop(self):
        p = ctypes.c_uint()
        while not self._stop.is_set():
            rc = self.nvml.nvmlDeviceGetPowerUsage(self.dev, ctypes.byref(p))
            inst = self._instant() if self.instant_ok else None
            if rc == 0:
                self.samples.append((time.monotonic_ns(), p.value, inst))
            time.sleep(self.period_s)

    def start(self):
        self._th.start()
        return self

    def stop(self):
        self._stop.set()
        self._th.join()

    def integrate(self, t0, t1, col=1):
        """Energy in J over [t0, t1] from column col (1: power usage, 2: instant)."""
        pts = [(t, s[col]) for s in self.samples for t in [s[0]] if s[col] is not None]
        e = 0.0
        for (ta, pa), (tb, pb) in zip(pts, pts[1:]):
            a, b = max(ta, t0), min(tb, t1)
            if b <= a:
                continue
            # linear between samples
            fa = pa + (pb - pa) * (a - ta) / (tb - ta)
            fb = pa + (pb - pa) * (b - ta) / (tb - ta)
            e += (fa + fb) / 2 * (b - a) / 1e12  # mW * ns -> J
        return e
