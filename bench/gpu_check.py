"""Real-GPU check of libgpupool; prints one JSON object. Run through bench/gpu_check.sh.

    python3 bench/gpu_check.py [--slice 8Gi] [--reps 3] [--out FILE]

1. Driver level, against the real libcuda / libnvidia-ml: the same `gp_drive` program the
   fake-driver tests use (native/build/tests/gp_drive), so the ABI assumptions of native/include
   are checked against NVIDIA's driver: each allocation path capped at the slice,
   cuMemGetInfo / NVML report it, a SIGKILLed process's memory comes back, VMM memory released
   while mapped stays charged until cuMemUnmap (also through cuMemRetainAllocationHandle),
   allocations from device 0's default pool are charged to it, and a CUDA array is charged. (The
   limiter's answer when it cannot tell the current device needs a driver without a working
   cuCtxGetDevice: the fake driver's tests cover it, a real driver cannot.)
2. PyTorch under the limiter: torch.cuda.mem_get_info() shows the slice; allocating past it raises
   torch.cuda.OutOfMemoryError and the process keeps working; with the default caching
   allocator, the cudaMallocAsync backend and expandable segments (cuMemCreate).
3. Overhead, with and without LD_PRELOAD, interleaved, median of --reps runs: an allocation-heavy
   loop (PyTorch with caching off: every tensor is a cudaMalloc/cudaFree), a bf16 matmul loop,
   and raw cuMemAlloc_v2/cuMemFree_v2 pairs through ctypes. Target: under 2%.

Skips (status "skipped", exit 0) when there is no GPU; the PyTorch parts skip when torch is
missing. Exit status 1 when a check fails. Only the standard library is needed here; the child
modes import torch.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from emit import emit

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "native" / "build" / "libgpupool.so"
DRIVE = ROOT / "native" / "build" / "tests" / "gp_drive"
MI = 1 << 20
GI = 1 << 30


def quantity(text: str) -> int:
    for suffix, mult in (("Gi", GI), ("Mi", MI)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * mult
    return int(text)


# ---------------------------------------------------------------------------------------------
# child modes (each runs in its own process, with or without the limiter preloaded)


def child_torch_slice(limit: int) -> dict[str, Any]:
    import torch

    free, total = torch.cuda.mem_get_info()
    chunk = 256 * MI
    chunks = []
    allocated = 0
    oom = False
    error = ""
    try:
        while allocated < 4 * limit:
            chunks.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
            allocated += chunk
    except torch.cuda.OutOfMemoryError as exc:
        oom = True
        error = str(exc).splitlines()[0][:200]
    del chunks
    torch.cuda.empty_cache()
    x = torch.ones(1 << 20, device="cuda")
    still_works = float(x.sum().item()) == float(1 << 20)
    free_after, _ = torch.cuda.mem_get_info()
    return {
        "mem_get_info_total": total,
        "mem_get_info_free": free,
        "allocated_before_oom": allocated,
        "oom_raised": oom,
        "oom_message": error,
        "works_after_oom": still_works,
        "free_after_release": free_after,
    }


def child_bench_alloc(iters: int) -> dict[str, Any]:
    import torch

    sizes = [1 * MI, 4 * MI, 16 * MI, 64 * MI]
    torch.cuda.init()
    for i in range(200):
        t = torch.empty(sizes[i % 4], dtype=torch.uint8, device="cuda")
        del t
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(iters):
        t = torch.empty(sizes[i % 4], dtype=torch.uint8, device="cuda")
        del t
    torch.cuda.synchronize()
    return {"seconds": time.perf_counter() - start, "iters": iters}


def child_bench_matmul(iters: int) -> dict[str, Any]:
    import torch

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        c = a @ b
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    del c
    return {"seconds": seconds, "iters": iters, "tflops": 2 * n**3 * iters / seconds / 1e12}


def child_bench_driver(iters: int) -> dict[str, Any]:
    cuda = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    ctx = ctypes.c_void_p()
    ptr = ctypes.c_uint64()
    check = [
        cuda.cuInit(0),
        cuda.cuDeviceGet(ctypes.byref(dev), 0),
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
        cuda.cuCtxSetCurrent(ctx),
    ]
    if any(check):
        return {"error": f"driver set-up failed: {check}"}
    alloc, free = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
    alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    free.argtypes = [ctypes.c_uint64]
    for _ in range(500):
        alloc(ctypes.byref(ptr), MI)
        free(ptr)
    start = time.perf_counter()
    for _ in range(iters):
        if alloc(ctypes.byref(ptr), MI) != 0:
            return {"error": "cuMemAlloc_v2 failed"}
        free(ptr)
    return {"seconds": time.perf_counter() - start, "iters": iters}


CHILDREN = {
    "torch-slice": child_torch_slice,
    "bench-alloc": child_bench_alloc,
    "bench-matmul": child_bench_matmul,
    "bench-driver": child_bench_driver,
}


# ---------------------------------------------------------------------------------------------
# orchestration


class Checks:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, name: str, ok: bool, detail: Any = None) -> None:
        self.items.append({"name": name, "ok": bool(ok), "detail": detail})

    @property
    def failed(self) -> int:
        return sum(1 for c in self.items if not c["ok"])


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "PYTORCH_CUDA"))}
    env.pop("LD_PRELOAD", None)
    env.setdefault("CUDA_VISIBLE_DEVICES", "0")
    return env


def limited_env(shared: Path, limit: str) -> dict[str, str]:
    env = base_env()
    env.update(
        {
            "LD_PRELOAD": str(LIB),
            "GPUPOOL_MEMORY_LIMIT": limit,
            "GPUPOOL_SHARED_FILE": str(shared),
        }
    )
    return env


def run_child(mode: str, arg: int, env: dict[str, str], timeout: int = 300) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--arg", str(arg)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-800:]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def drive(env: dict[str, str], *steps: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(DRIVE), *steps], env=env, capture_output=True, text=True, timeout=120
    )
    out: list[dict[str, Any]] = []
    for line in done.stdout.splitlines():
        op, *fields = line.split()
        step: dict[str, Any] = {"op": op}
        for field in fields:
            if "=" in field:
                key, value = field.split("=", 1)
                step[key] = int(value)
        out.append(step)
    if done.returncode != 0:
        out.append({"op": "exit", "rc": done.returncode, "stderr": done.stderr[-500:]})
    return out


def driver_checks(checks: Checks, tmp: Path) -> dict[str, Any]:
    """gp_drive against the real driver, with a 1Gi slice."""
    env = limited_env(tmp / "driver-usage", "1Gi")
    paths = ["alloc", "async", "pool", "create", "managed", "gpa1", "gpa2", "dlsym", "dlsym_gpa"]
    steps: list[str] = ["alloc", "256Mi", "info", "total", "0", "nvml", "0", "nvml_v2", "0"]
    steps += ["gpa_info", "free", "0"]
    ident = 1
    for path in paths:
        free_op = "freeasync" if path in ("async", "pool") else "free"
        steps += [path, "768Mi", path, "512Mi", free_op, str(ident)]
        ident += 2
    steps += ["info"]
    got = drive(env, *steps)
    by_op: dict[str, list[dict[str, Any]]] = {}
    for step in got:
        by_op.setdefault(step["op"], []).append(step)
    info = by_op.get("info", [{}])
    checks.add("driver: cuMemGetInfo total is the slice", info[0].get("total") == GI, info[0])
    checks.add(
        "driver: cuMemGetInfo free is the slice less usage",
        info[0].get("free") == GI - 256 * MI,
        info[0],
    )
    total = by_op.get("total", [{}])[0]
    checks.add("driver: cuDeviceTotalMem is the slice", total.get("total") == GI, total)
    for name in ("nvml", "nvml_v2"):
        nv = by_op.get(name, [{}])[0]
        checks.add(
            f"driver: {name} reports the slice",
            nv.get("rc") == 0 and nv.get("total") == GI and nv.get("used") == 256 * MI,
            nv,
        )
    gi = by_op.get("gpa_info", [{}])[0]
    checks.add(
        "driver: cuGetProcAddress(cuMemGetInfo) reports the slice", gi.get("total") == GI, gi
    )
    for path in paths:
        rcs = [s.get("rc") for s in by_op.get(path, [])][-2:]  # "alloc" also made the 256Mi
        checks.add(f"driver: {path} capped (768Mi ok, +512Mi refused with 2)", rcs == [0, 2], rcs)
    frees = [s.get("rc") for s in by_op.get("free", []) + by_op.get("freeasync", [])]
    checks.add("driver: every free succeeded", all(rc == 0 for rc in frees), frees)
    checks.add(
        "driver: all memory back at the end", info[-1].get("free") == GI, info[-1] if info else None
    )

    # VMM: a handle released while mapped keeps its 768Mi until unmapped, as the driver does;
    # a retained handle keeps it until its own release. Sizes are multiples of the 2Mi granularity.
    vmm = drive(
        env,
        *["create", "768Mi", "map", "0", "free", "0", "create", "512Mi", "info", "unmap", "1"],
        *["info", "create", "768Mi", "map", "3", "retain", "4", "free", "3", "unmap", "4"],
        *["create", "512Mi", "free", "5", "create", "512Mi", "free", "7", "info"],
    )
    vmm_creates = [s.get("rc") for s in vmm if s["op"] == "create"]
    vmm_infos = [s.get("free") for s in vmm if s["op"] == "info"]
    vmm_other = [s.get("rc") for s in vmm if s["op"] in ("map", "unmap", "retain", "free")]
    checks.add(
        "driver: VMM memory released while mapped stays charged until unmapped",
        vmm_creates[:2] == [0, 2] and vmm_infos[:2] == [GI - 768 * MI, GI],
        vmm,
    )
    checks.add(
        "driver: a retained VMM handle keeps its memory until its last release",
        vmm_creates[2:] == [0, 2, 0] and vmm_infos[2:] == [GI],
        vmm,
    )
    checks.add(
        "driver: every map, unmap, retain and release succeeded",
        bool(vmm_other) and all(rc == 0 for rc in vmm_other),
        vmm_other,
    )
    # A CUDA array of 768Mi of floats is charged at least that; the driver's padding is not.
    arr = drive(env, "array", "16384", "12288", "0x20", "1", "alloc", "512Mi", "free", "0", "info")
    checks.add(
        "driver: a CUDA array is charged its elements and credited at cuArrayDestroy",
        [s.get("rc") for s in arr if s["op"] in ("array", "alloc", "free")] == [0, 2, 0]
        and arr[-1].get("free") == GI,
        arr,
    )
    pool = drive(env, "pool_dev", "0", "768Mi", "pool_dev", "0", "512Mi", "freeasync", "0", "info")
    checks.add(
        "driver: device 0's default pool is charged to device 0 and credited back",
        [s.get("rc") for s in pool if s["op"] == "pool_dev"] == [0, 2]
        and pool[-1].get("free") == GI,
        pool,
    )

    # SIGKILL: a process holding 768Mi is killed; its share comes back.
    victim = subprocess.Popen(
        [str(DRIVE), "alloc", "768Mi", "ready", "wait"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert victim.stdout is not None
    for line in victim.stdout:
        if line.strip() == "READY":
            break
    blocked = drive(env, "alloc", "768Mi")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=60)
    after = drive(env, "alloc", "768Mi")
    checks.add(
        "driver: second process refused while the first holds 768Mi",
        bool(blocked) and blocked[0].get("rc") == 2,
        blocked,
    )
    checks.add(
        "driver: SIGKILLed process's 768Mi returned", bool(after) and after[0].get("rc") == 0, after
    )

    control = drive(base_env(), "alloc", "768Mi", "alloc", "512Mi", "info")
    checks.add(
        "driver: without the limiter the same allocations succeed (control)",
        [s.get("rc") for s in control if s["op"] == "alloc"] == [0, 0],
        control,
    )
    return {"steps": got}


def torch_checks(checks: Checks, tmp: Path, slice_text: str) -> dict[str, Any]:
    limit = quantity(slice_text)
    variants = {
        "caching": {},
        "cudaMallocAsync": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
        "expandable_segments": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    }
    out: dict[str, Any] = {}
    for name, extra in variants.items():
        env = limited_env(tmp / f"torch-{name}", slice_text)
        env.update(extra)
        res = run_child("torch-slice", limit, env)
        out[name] = res
        if "error" in res:
            checks.add(f"torch[{name}]: ran", False, res["error"])
            continue
        checks.add(
            f"torch[{name}]: mem_get_info total is the slice",
            res["mem_get_info_total"] == limit,
            res["mem_get_info_total"],
        )
        checks.add(
            f"torch[{name}]: mem_get_info free within the slice",
            0 < res["mem_get_info_free"] <= limit,
            res["mem_get_info_free"],
        )
        checks.add(f"torch[{name}]: OutOfMemoryError past the slice", res["oom_raised"], res)
        checks.add(
            f"torch[{name}]: allocated at most the slice, at least half of it",
            limit // 2 <= res["allocated_before_oom"] <= limit,
            res["allocated_before_oom"],
        )
        checks.add(f"torch[{name}]: usable after the OOM", res["works_after_oom"], None)
    return out


def overhead(tmp: Path, reps: int, have_torch: bool) -> dict[str, Any]:
    modes = {"bench-driver": 20000}
    if have_torch:
        modes.update({"bench-alloc": 5000, "bench-matmul": 200})
    raw: dict[str, dict[str, list[float]]] = {m: {"base": [], "limited": []} for m in modes}
    errors: list[str] = []
    for rep in range(reps):
        for mode, iters in modes.items():
            order = ["base", "limited"] if rep % 2 == 0 else ["limited", "base"]
            for which in order:
                limited = which == "limited"
                env = limited_env(tmp / "bench-usage", "100Gi") if limited else base_env()
                if mode == "bench-alloc":
                    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
                res = run_child(mode, iters, env)
                if "error" in res:
                    errors.append(f"{mode}/{which}: {res['error']}")
                    continue
                raw[mode][which].append(res["seconds"] / res["iters"])
    summary: dict[str, Any] = {}
    for mode, series in raw.items():
        if not series["base"] or not series["limited"]:
            continue
        base = statistics.median(series["base"])
        lim = statistics.median(series["limited"])
        summary[mode] = {
            "base_us_per_iter": round(base * 1e6, 3),
            "limited_us_per_iter": round(lim * 1e6, 3),
            "overhead_pct": round((lim / base - 1) * 100, 2),
            "within_2pct_target": (lim / base - 1) * 100 < 2,
            "runs": {k: [round(v * 1e6, 3) for v in vs] for k, vs in series.items()},
        }
    if errors:
        summary["errors"] = errors
    return summary


def gpu_present() -> str | None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"no CUDA driver (libcuda.so.1): {exc}"
    count = ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "CUDA driver present but no usable GPU"
    return None


def device_name() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice", default="8Gi", help="slice for the PyTorch checks")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--arg", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(CHILDREN[args.child](args.arg)))
        return 0

    report: dict[str, Any] = {"check": "libgpupool on a real GPU"}

    def finish(code: int) -> int:
        emit(report, args.out, indent=2)
        return code

    missing = gpu_present()
    if missing is not None:
        report.update({"status": "skipped", "reason": missing})
        return finish(0)
    if not LIB.is_file() or not DRIVE.is_file():
        report.update({"status": "failed", "reason": "run `make -C native all test-bins` first"})
        return finish(1)

    report["device"] = device_name()
    checks = Checks()
    started = time.perf_counter()
    try:
        import torch

        have_torch = True
        report["torch"] = {"version": torch.__version__}
    except ImportError as exc:
        have_torch = False
        report["torch"] = {"skipped": f"PyTorch not importable ({exc}); PyTorch checks skipped"}

    with tempfile.TemporaryDirectory(prefix="gpupool-gpu-check-") as tmpdir:
        tmp = Path(tmpdir)
        report["driver"] = driver_checks(checks, tmp)
        if have_torch:
            report["torch"]["slice"] = args.slice
            report["torch"]["results"] = torch_checks(checks, tmp, args.slice)
        if not args.skip_bench:
            report["overhead"] = overhead(tmp, args.reps, have_torch)
    report["checks"] = checks.items
    report["failed"] = checks.failed
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["status"] = "ok" if checks.failed == 0 else "failed"
    return finish(0 if checks.failed == 0 else 1)


if __name__ == "__main__":
    sys.exit(main())
