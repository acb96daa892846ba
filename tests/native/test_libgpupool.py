"""libgpupool against a fake CUDA driver and NVML: no GPU needed.

`make -C native test-bins` builds the limiter, a fake libcuda.so.1 / libnvidia-ml.so.1 over host
memory, and `gp_drive`, which runs a script of driver calls given on its command line and prints
one line per step (`alloc rc=2 id=1`, `info rc=0 free=... total=...`). Each test runs gp_drive
under LD_PRELOAD=libgpupool.so with its own shared accounting file and asserts on those lines.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.waiting import wait_until

from gpupool.node.limiter_usage import read_usage

pytestmark = pytest.mark.native

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native"
BUILD = NATIVE / "build"
LIB = BUILD / "libgpupool.so"
FAKE = BUILD / "fake"
FAKE_NO_CTX = BUILD / "fake-no-ctx-device"  # the fake driver without cuCtxGetDevice
DRIVE = BUILD / "tests" / "gp_drive"
PROBE = BUILD / "tests" / "gp_probe"

MI = 1 << 20
GI = 1 << 30
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_INVALID_CONTEXT = 201
FAKE_TOTAL = 4 * GI
TIMEOUT = 60


@pytest.fixture(scope="session", autouse=True)
def built() -> None:
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("libgpupool tests need make and a C compiler (cc)")
    done = subprocess.run(
        ["make", "-s", "-C", str(NATIVE), "test-bins"], capture_output=True, text=True
    )
    assert done.returncode == 0, f"building native/ failed:\n{done.stdout}\n{done.stderr}"


Step = dict[str, object]


def parse(stdout: str) -> list[Step]:
    steps: list[Step] = []
    for line in stdout.splitlines():
        op, *fields = line.split()
        step: Step = {"op": op}
        args: list[str] = []
        for field in fields:
            if "=" in field:
                key, value = field.split("=", 1)
                step[key] = int(value)
            else:
                args.append(field)
        if args:
            step["args"] = args
        steps.append(step)
    return steps


@dataclass
class Limiter:
    """Environment for one scenario: a shared file of its own, the fake driver, a limit."""

    env: dict[str, str]

    def run(self, *steps: str, preload: bool = True, extra: dict[str, str] | None = None) -> Run:
        env = self.environ(preload, extra)
        done = subprocess.run(
            [str(DRIVE), *steps], env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
        assert done.returncode == 0, f"gp_drive failed ({done.returncode}): {done.stderr}"
        return Run(parse(done.stdout), done.stderr)

    def start(self, *steps: str) -> subprocess.Popen[str]:
        """Starts gp_drive in the background; returns once it has printed READY."""
        proc = subprocess.Popen(
            [str(DRIVE), *steps],
            env=self.environ(True, None),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.strip() == "READY":
                return proc
        proc.kill()
        raise AssertionError(f"background gp_drive ended before READY: {seen}")

    def environ(self, preload: bool, extra: dict[str, str] | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "FAKE_"))}
        env.pop("LD_PRELOAD", None)
        env.update(self.env)
        if preload:
            env["LD_PRELOAD"] = str(LIB)
        env.update(extra or {})
        return env


@dataclass
class Run:
    steps: list[Step]
    stderr: str

    def rcs(self, op: str | None = None) -> list[object]:
        return [s["rc"] for s in self.steps if "rc" in s and (op is None or s["op"] == op)]

    def first(self, op: str) -> Step:
        return next(s for s in self.steps if s["op"] == op)


@pytest.fixture
def limiter(tmp_path: Path) -> Iterator[Limiter]:
    yield Limiter(
        {
            "LD_LIBRARY_PATH": str(FAKE),
            "GPUPOOL_SHARED_FILE": str(tmp_path / "usage"),
            "GPUPOOL_MEMORY_LIMIT": "64Mi",
            "FAKE_CUDA_TOTAL_MEM": str(FAKE_TOTAL),
        }
    )


def test_allocation_past_the_limit_is_out_of_memory(limiter: Limiter) -> None:
    run = limiter.run(
        "alloc", "40Mi", "alloc", "40Mi", "free", "0", "alloc", "40Mi", "alloc", "24Mi"
    )
    assert run.rcs() == [0, CUDA_ERROR_OUT_OF_MEMORY, 0, 0, 0]


def test_without_the_limiter_the_fake_driver_allows_it(limiter: Limiter) -> None:
    # The control for the test above: the fake driver itself does not enforce 64Mi.
    run = limiter.run("alloc", "40Mi", "alloc", "40Mi", "info", preload=False)
    assert run.rcs("alloc") == [0, 0]
    assert run.first("info")["total"] == FAKE_TOTAL


def test_exactly_the_limit_fits_and_one_byte_more_does_not(limiter: Limiter) -> None:
    run = limiter.run("alloc", "64Mi", "alloc", "1")
    assert run.rcs() == [0, CUDA_ERROR_OUT_OF_MEMORY]


@pytest.mark.parametrize(
    "fill",
    [
        ["alloc", "48Mi"],
        ["alloc_v1", "48Mi"],
        ["managed", "48Mi"],
        ["async", "48Mi"],
        ["async_ptsz", "48Mi"],
        ["pool", "48Mi"],
        ["create", "48Mi"],
        ["pitch", "49152", "1024"],  # 48Mi as 1024 rows of 48Ki
        ["pitch_v1", "49152", "1024"],
        ["gpa1", "48Mi"],
        ["gpa2", "48Mi"],
        ["gpa2_async_ptsz", "48Mi"],
        ["dlsym", "48Mi"],
        ["dlsym_gpa", "48Mi"],
        ["dlsym_default", "48Mi"],
    ],
    ids=lambda fill: fill[0],
)
def test_every_allocation_path_is_counted_and_capped(limiter: Limiter, fill: list[str]) -> None:
    # 48Mi through the path under test, then 32Mi more (over 64Mi) must fail both through the
    # plain entry point and through the same path; after freeing, the same 32Mi fits.
    op = fill[0]
    again = [op, *(["49152", "683"] if op.startswith("pitch") else ["32Mi"])]
    run = limiter.run(*fill, "alloc", "32Mi", *again, "free", "0", "alloc", "32Mi")
    assert run.rcs() == [0, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY, 0, 0]


# Every hooked function the CUDA runtime (and PyTorch's DriverAPI) may fetch through
# cuGetProcAddress, by the name it asks for and the variant it gets at CUDA 12.4.
FETCHED = [
    ("cuMemAlloc", "cuMemAlloc_v2"),
    ("cuMemAllocPitch", "cuMemAllocPitch_v2"),
    ("cuMemAllocManaged", "cuMemAllocManaged"),
    ("cuMemAllocAsync", "cuMemAllocAsync"),
    ("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync"),
    ("cuMemFree", "cuMemFree_v2"),
    ("cuMemFreeAsync", "cuMemFreeAsync"),
    ("cuMemCreate", "cuMemCreate"),
    ("cuMemRelease", "cuMemRelease"),
    ("cuMemMap", "cuMemMap"),
    ("cuMemUnmap", "cuMemUnmap"),
    ("cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle"),
    ("cuMemPoolCreate", "cuMemPoolCreate"),
    ("cuMemPoolDestroy", "cuMemPoolDestroy"),
    ("cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool"),
    ("cuDeviceGetMemPool", "cuDeviceGetMemPool"),
    ("cuArrayCreate", "cuArrayCreate_v2"),
    ("cuArray3DCreate", "cuArray3DCreate_v2"),
    ("cuMipmappedArrayCreate", "cuMipmappedArrayCreate"),
    ("cuArrayDestroy", "cuArrayDestroy"),
    ("cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy"),
    ("cuMemGetInfo", "cuMemGetInfo_v2"),
    ("cuDeviceTotalMem", "cuDeviceTotalMem_v2"),
]


@pytest.mark.parametrize(("base", "symbol"), FETCHED, ids=[b for b, _ in FETCHED])
def test_cugetprocaddress_hands_out_the_hook(limiter: Limiter, base: str, symbol: str) -> None:
    assert limiter.run("gpa_hooked", base, symbol).first("gpa_hooked") == {
        "op": "gpa_hooked", "rc": 0, "limiter": 1,
    }  # fmt: skip


def test_an_inert_limiter_hands_out_the_drivers_own_function(limiter: Limiter) -> None:
    # The control for the test above: without a configuration nothing is substituted, and the
    # same check finds the function in the driver, not in the limiter.
    run = limiter.run("gpa_hooked", "cuMemMap", "cuMemMap", extra={"GPUPOOL_MEMORY_LIMIT": ""})
    assert run.first("gpa_hooked") == {"op": "gpa_hooked", "rc": 0, "limiter": 0}


def test_cumemcreate_is_counted_until_cumemrelease(limiter: Limiter) -> None:
    run = limiter.run("create", "40Mi", "info", "free", "0", "info")
    infos = [s for s in run.steps if s["op"] == "info"]
    assert infos[0]["free"] == 24 * MI
    assert infos[1]["free"] == 64 * MI


def test_vmm_memory_released_while_mapped_stays_charged_until_unmapped(limiter: Limiter) -> None:
    # The CUDA samples' idiom: create, map, release at once ("freed when unmapped"). The driver
    # keeps the 48Mi while mapped, so must the limiter, or mapping would escape the cap.
    run = limiter.run(
        "create", "48Mi", "map", "0", "free", "0", "create", "32Mi", "info",
        "unmap", "1", "info", "create", "32Mi",
    )  # fmt: skip
    assert run.rcs("map") + run.rcs("free") + run.rcs("unmap") == [0, 0, 0]
    assert run.rcs("create") == [0, CUDA_ERROR_OUT_OF_MEMORY, 0]
    infos = [s["free"] for s in run.steps if s["op"] == "info"]
    assert infos == [16 * MI, 64 * MI]


def test_a_retained_vmm_handle_keeps_its_memory_until_the_last_release(limiter: Limiter) -> None:
    # cuMemRetainAllocationHandle hands out one more reference to the same handle value.
    run = limiter.run(
        "create", "48Mi", "map", "0", "retain", "1", "free", "0", "unmap", "1",
        "create", "32Mi", "free", "2", "create", "32Mi",
    )  # fmt: skip
    assert run.rcs("retain") == [0]
    assert run.rcs("free") == [0, 0]
    assert run.rcs("create") == [0, CUDA_ERROR_OUT_OF_MEMORY, 0]


def test_one_unmap_over_several_mappings_lets_go_of_each(limiter: Limiter) -> None:
    run = limiter.run(
        "create", "24Mi", "create", "24Mi", "map_pair", "0", "1", "free", "0", "free", "1",
        "info", "unmap", "2", "info",
    )  # fmt: skip
    assert run.rcs("map_pair") == [0]
    assert [s["free"] for s in run.steps if s["op"] == "info"] == [16 * MI, 64 * MI]


def test_a_vmm_handle_still_mapped_is_charged_once_however_often_it_is_mapped(
    limiter: Limiter,
) -> None:
    run = limiter.run(
        "create", "32Mi", "map", "0", "map", "0", "free", "0", "info", "unmap", "1", "info",
        "unmap", "2", "info",
    )  # fmt: skip
    assert [s["free"] for s in run.steps if s["op"] == "info"] == [32 * MI, 32 * MI, 64 * MI]


ARRAYS = [
    (["array", "4096", "2048", "0x20", "1"], 32 * MI, "2D, one float"),
    (["array_v1", "2048", "2048", "0x01", "4"], 16 * MI, "v1 ABI, four 8-bit"),
    (["array", "2048", "2048", "0x10", "2"], 16 * MI, "two halves"),
    (["array3d", "1024", "1024", "8", "0"], 32 * MI, "3D"),
    (["array3d", "1024", "1024", "8", "1"], 32 * MI, "8 layers"),
    (["array3d", "4096", "4096", "0", "0x40"], 0, "sparse: no memory of its own"),
    (["mipmap", "2048", "2048", "0", "2"], 20 * MI, "two levels, 16Mi + 4Mi"),
    (["mipmap", "1024", "1024", "4", "2"], 18 * MI, "3D, two levels, 16Mi + 2Mi"),
    (["array", "8192", "4096", "0x91", "4"], 16 * MI, "a format we do not know"),
]


@pytest.mark.parametrize(("array", "charged"), [a[:2] for a in ARRAYS], ids=[a[2] for a in ARRAYS])
def test_cuda_arrays_are_charged_at_least_their_elements(
    limiter: Limiter, array: list[str], charged: int
) -> None:
    # The driver does not say what an array takes; the limiter charges its elements at the
    # format's size (a format it does not know: half a byte per element, the least any takes).
    run = limiter.run(*array, "info", "free", "0", "info")
    assert run.rcs(array[0]) == [0]
    assert run.rcs("free") == [0]
    assert [s["free"] for s in run.steps if s["op"] == "info"] == [64 * MI - charged, 64 * MI]


def test_an_array_past_the_limit_is_refused(limiter: Limiter) -> None:
    run = limiter.run("array", "4096", "4096", "0x20", "1", "alloc", "1", "free", "0", "alloc", "1")
    assert run.rcs() == [0, CUDA_ERROR_OUT_OF_MEMORY, 0, 0]
    assert limiter.run("mipmap", "4096", "4096", "0", "2").rcs() == [CUDA_ERROR_OUT_OF_MEMORY]


def test_host_located_vmm_memory_is_not_device_memory(limiter: Limiter) -> None:
    run = limiter.run("create_host", "100Mi", "alloc", "64Mi")
    assert run.rcs() == [0, 0]


def test_async_free_returns_memory(limiter: Limiter) -> None:
    run = limiter.run("async", "48Mi", "freeasync", "0", "async", "48Mi")
    assert run.rcs() == [0, 0, 0]


def test_pitched_allocation_is_charged_by_its_pitch(limiter: Limiter) -> None:
    # The fake rounds rows to 512 bytes: 1000-byte rows cost 1024, so 32768 rows take 32Mi.
    run = limiter.run("pitch", "1000", "32768", "info")
    assert run.first("pitch_value")["args"] == ["1024"]
    assert run.first("info")["free"] == 32 * MI


def test_memory_info_reports_the_slice(limiter: Limiter) -> None:
    run = limiter.run(
        "alloc", "16Mi", "info", "info_v1", "total", "0", "total_v1", "0", "gpa_info",
        "nvml", "0", "nvml_v2", "0",
    )  # fmt: skip
    left = 48 * MI
    assert run.first("info") == {"op": "info", "rc": 0, "free": left, "total": 64 * MI}
    assert run.first("info_v1") == {"op": "info_v1", "rc": 0, "free": left, "total": 64 * MI}
    assert run.first("total")["total"] == 64 * MI
    assert run.first("total_v1")["total"] == 64 * MI
    assert run.first("gpa_info")["free"] == left
    assert run.first("gpa_info")["total"] == 64 * MI
    nvml = run.first("nvml")
    assert (nvml["total"], nvml["free"], nvml["used"]) == (64 * MI, left, 16 * MI)
    nvml2 = run.first("nvml_v2")
    assert nvml2["rc"] == 0
    assert (nvml2["total"], nvml2["free"], nvml2["used"]) == (64 * MI, left, 16 * MI)


def test_reported_free_never_exceeds_what_the_card_has(limiter: Limiter) -> None:
    # A 1Gi card with a 2Gi limit (a misconfiguration): report the card, not the promise.
    run = limiter.run("info", extra={"FAKE_CUDA_TOTAL_MEM": str(GI), "GPUPOOL_MEMORY_LIMIT": "2Gi"})
    assert run.first("info")["total"] == GI
    assert run.first("info")["free"] == GI


def test_two_processes_share_one_limit(limiter: Limiter) -> None:
    first = limiter.start("alloc", "40Mi", "ready", "wait", "info")
    try:
        second = limiter.run("alloc", "40Mi", "alloc", "24Mi", "info")
        assert second.rcs("alloc") == [CUDA_ERROR_OUT_OF_MEMORY, 0]
        assert second.first("info")["free"] == 0
    finally:
        out, _ = first.communicate("go\n", timeout=TIMEOUT)
    # the second process has exited and its 24Mi are back; the first still holds 40Mi
    assert parse(out)[-1] == {"op": "info", "rc": 0, "free": 24 * MI, "total": 64 * MI}
    # both exited normally: everything is back
    assert limiter.run("alloc", "64Mi").rcs() == [0]


def test_racing_processes_and_threads_fill_the_slice_exactly(limiter: Limiter) -> None:
    # 4 processes x 4 threads allocate 256Ki chunks until refused, all at once, holding what they
    # got: together they must get exactly 64Mi / 256Ki = 256 chunks, never one more.
    racers = [
        limiter.start("ready", "wait", "fill_mt", "4", "256Ki", "ready", "wait") for _ in "abcd"
    ]
    counts: list[int] = []
    try:
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        for racer in racers:
            assert racer.stdout is not None
            line = racer.stdout.readline()
            if line.startswith("resumed"):
                line = racer.stdout.readline()
            step = parse(line)[0]
            assert step["op"] == "fill_mt", line
            assert step["rc"] == CUDA_ERROR_OUT_OF_MEMORY
            count = step["count"]
            assert isinstance(count, int)
            counts.append(count)
            assert racer.stdout.readline().strip() == "READY"
    finally:
        for racer in racers:
            racer.communicate("done\n", timeout=TIMEOUT)
    assert sum(counts) == 256, counts


def test_a_sigkilled_process_memory_returns_to_the_pool(limiter: Limiter) -> None:
    victim = limiter.start("alloc", "48Mi", "ready", "wait")
    assert limiter.run("alloc", "48Mi").rcs() == [CUDA_ERROR_OUT_OF_MEMORY]
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=TIMEOUT)
    after = limiter.run("info", "alloc", "48Mi")
    assert after.first("info")["free"] == 64 * MI
    assert after.rcs("alloc") == [0]


def test_the_accounting_file_shows_live_use_and_a_new_process_reaps_the_dead(
    limiter: Limiter,
) -> None:
    # What the agent reads from the host (gpupool.node.limiter_usage, without the lock): the
    # live processes' bytes and the last activity; a SIGKILLed process's bytes stay until a
    # process starts (a restarted container), which reaps them before its first call.
    shared = Path(limiter.env["GPUPOOL_SHARED_FILE"])
    victim = limiter.start("alloc", "48Mi", "ready", "wait")
    held = read_usage(shared)
    assert held is not None and held.used_bytes[0] == 48 * MI
    assert held.last_active_s is not None
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=TIMEOUT)
    left = read_usage(shared)
    assert left is not None and left.used_bytes[0] == 48 * MI  # nobody has reaped it yet
    # 48Mi (dead) + 1Mi fits, so only the start-up reap can take the dead entry away
    assert limiter.run("alloc", "1Mi").rcs() == [0]
    after = read_usage(shared)
    assert after is not None and after.used_bytes[0] == 0


def test_an_earlier_container_instances_entry_of_the_same_pid_is_reaped(limiter: Limiter) -> None:
    # A restarted container keeps its accounting folder, and in its new pid namespace its first
    # process has the pid an earlier one had (pid 1). Its stale entry, of our pid but another
    # start time, must not count against us: forge one for the process about to start.
    shared = Path(limiter.env["GPUPOOL_SHARED_FILE"])
    assert limiter.run("alloc", "1Mi").rcs() == [0]  # the file, with no live entry
    proc = limiter.start("ready", "wait", "info")
    head = struct.Struct("<QIIIIQ")
    with shared.open("r+b") as f:
        magic, version, size, offset, hw, last = head.unpack(f.read(head.size))
        f.seek(0)
        f.write(head.pack(magic, version, size, offset, max(hw, 1), last))
        f.seek(offset)
        f.write(struct.pack("<iIQ16Q", proc.pid, 0, 1, 48 * MI, *([0] * 15)))
    out, _ = proc.communicate("go\n", timeout=TIMEOUT)
    assert parse(out)[-1] == {"op": "info", "rc": 0, "free": 64 * MI, "total": 64 * MI}


def test_a_killed_but_unreaped_zombie_holds_nothing(limiter: Limiter) -> None:
    victim = limiter.start("alloc", "48Mi", "ready", "wait")
    try:
        victim.send_signal(signal.SIGKILL)
        # Wait until the kernel has made it a zombie, without reaping it (no waitpid).
        status = Path(f"/proc/{victim.pid}/stat")
        wait_until(
            lambda: status.read_text().rsplit(")", 1)[1].split()[0] == "Z",
            TIMEOUT,
            "the SIGKILLed process to become a zombie",
            interval_s=0.01,
        )
        assert limiter.run("alloc", "48Mi").rcs() == [0]
    finally:
        victim.wait(timeout=TIMEOUT)


def test_a_child_that_exits_without_freeing_gives_its_share_back(limiter: Limiter) -> None:
    # The parent has allocated before forking, so the child must not charge the parent's entry:
    # 8Mi (parent) + 40Mi (dead child) + 40Mi only fits once the child's share is reclaimed.
    run = limiter.run("alloc", "8Mi", "fork_alloc", "40Mi", "alloc", "40Mi", "info")
    assert run.first("fork_alloc")["child_exit"] == 0
    assert run.rcs("alloc") == [0, 0]
    assert run.first("info")["free"] == 16 * MI


def test_a_sigkilled_lock_holder_does_not_wedge_the_others(limiter: Limiter) -> None:
    holder = limiter.start("alloc", "16Mi", "hold_lock", "ready", "wait")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=TIMEOUT)
    assert holder.stdout is not None
    # 16Mi (dead holder) + 56Mi is over 64Mi: this only fits once the dead holder's share is
    # reclaimed, and it only returns at all if the lock recovered (else run() times out).
    try:
        run = limiter.run("alloc", "56Mi", "info")
    except subprocess.TimeoutExpired as exc:  # pragma: no cover - the failure being guarded
        raise AssertionError("the shared lock stayed held after its holder was SIGKILLed") from exc
    assert run.rcs("alloc") == [0]
    assert run.first("info")["free"] == 8 * MI


def test_the_lock_holder_really_held_the_lock(limiter: Limiter) -> None:
    # Guards the test above against a vacuous pass: while the holder is alive, others block.
    holder = limiter.start("hold_lock", "ready", "wait")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run(
                [str(DRIVE), "alloc", "1Mi"], env=limiter.environ(True, None),
                capture_output=True, timeout=2,
            )  # fmt: skip
    finally:
        holder.kill()
        holder.wait(timeout=TIMEOUT)


@pytest.mark.parametrize("problem", ["no such directory", "foreign file"])
def test_without_a_usable_shared_file_each_process_is_still_capped(
    limiter: Limiter, tmp_path: Path, problem: str
) -> None:
    shared = tmp_path / "absent" / "usage"
    if problem == "foreign file":
        shared = tmp_path / "foreign"
        shared.write_bytes(b"not a gpupool accounting file")
    run = limiter.run("alloc", "40Mi", "alloc", "40Mi", extra={"GPUPOOL_SHARED_FILE": str(shared)})
    assert run.rcs("alloc") == [0, CUDA_ERROR_OUT_OF_MEMORY]
    assert "accounting this process alone" in run.stderr
    if problem == "foreign file":
        assert shared.read_bytes() == b"not a gpupool accounting file"  # left alone


def test_frees_never_underflow(limiter: Limiter) -> None:
    run = limiter.run(
        "alloc", "16Mi", "free", "0", "free", "0", "free_unknown", "info", "alloc", "64Mi",
        "alloc", "1",
    )  # fmt: skip
    frees = run.rcs("free") + run.rcs("free_unknown")
    assert frees == [0, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE]
    assert run.first("info")["free"] == 64 * MI  # not more: usage did not wrap below zero
    assert run.rcs("alloc") == [0, 0, CUDA_ERROR_OUT_OF_MEMORY]


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [("1.5Gi", 3 * GI // 2), ("500Mi", 500 * MI), ("1G", 10**9), ("123456789", 123456789)],
)
def test_memory_limit_quantities(limiter: Limiter, quantity: str, expected: int) -> None:
    run = limiter.run("info", extra={"GPUPOOL_MEMORY_LIMIT": quantity})
    assert run.first("info")["total"] == expected


def test_limits_file_by_uuid_and_index(limiter: Limiter, tmp_path: Path) -> None:
    limits = tmp_path / "limits"
    limits.write_text(
        "# gpupool limits\n"
        "0 100Mi 30\n"
        "GPU-fa4ec0de-0000-0000-0000-000000000001 200Mi   # second card, by uuid\n"
    )
    env = {"GPUPOOL_LIMITS_FILE": str(limits), "FAKE_CUDA_DEVICES": "2"}
    run = limiter.run(
        "info", "ctx", "1", "info", "alloc", "150Mi", "alloc", "100Mi", "total", "0",
        "nvml", "0", "nvml", "1", extra=env,
    )  # fmt: skip
    infos = [s for s in run.steps if s["op"] == "info"]
    assert [i["total"] for i in infos] == [100 * MI, 200 * MI]
    assert run.rcs("alloc") == [0, CUDA_ERROR_OUT_OF_MEMORY]
    assert run.first("total")["total"] == 100 * MI
    nvml = [s for s in run.steps if s["op"] == "nvml"]
    assert [(n["total"], n["used"]) for n in nvml] == [(100 * MI, 0), (200 * MI, 150 * MI)]


def test_the_fake_driver_shows_the_cards_fake_cuda_uuids_names_numbered_from_0(
    limiter: Limiter, tmp_path: Path
) -> None:
    """As NVIDIA's toolkit shows a container the cards NVIDIA_VISIBLE_DEVICES names: card 1 is
    the process's device 0, and the limiter finds its line by uuid (the dev cluster's real node
    gives pods on card 1 this way)."""
    limits = tmp_path / "limits"
    limits.write_text(
        "GPU-fa4ec0de-0000-0000-0000-000000000000 100Mi\n"
        "GPU-fa4ec0de-0000-0000-0000-000000000001 200Mi\n"
    )
    card = "GPU-fa4ec0de-0000-0000-0000-0000000000{:02x}".format
    one = {"GPUPOOL_LIMITS_FILE": str(limits), "FAKE_CUDA_UUIDS": card(1)}
    run = limiter.run("info", "nvml", "0", "alloc", "150Mi", "ctx", "1", extra=one)
    assert run.first("info")["total"] == 200 * MI  # card 1's line, though it is device 0
    assert run.first("nvml")["total"] == 200 * MI
    assert run.rcs("alloc") == [0]
    assert run.first("ctx")["rc"] == CUDA_ERROR_INVALID_VALUE  # one card: there is no device 1
    both = {"GPUPOOL_LIMITS_FILE": str(limits), "FAKE_CUDA_UUIDS": f"{card(1)},{card(0)}"}
    run = limiter.run("info", "ctx", "1", "info", "nvml", "0", "nvml", "1", extra=both)
    assert [s["total"] for s in run.steps if s["op"] == "info"] == [200 * MI, 100 * MI]
    assert [s["total"] for s in run.steps if s["op"] == "nvml"] == [200 * MI, 100 * MI]


def test_a_device_missing_from_the_limits_file_is_refused(limiter: Limiter, tmp_path: Path) -> None:
    limits = tmp_path / "limits"
    limits.write_text("0 100Mi\n")
    env = {"GPUPOOL_LIMITS_FILE": str(limits), "FAKE_CUDA_DEVICES": "2"}
    run = limiter.run("alloc", "1Mi", "ctx", "1", "alloc", "1Mi", extra=env)
    assert run.rcs("alloc") == [0, CUDA_ERROR_OUT_OF_MEMORY]
    assert "not in the limits" in run.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("0 12Gx\n", "memory must be a quantity"),
        ("zero 1Gi\n", "device must be an index"),
        ("0 1Gi 101\n", "compute-percent"),
        ("0 1Gi\n0 2Gi\n", "listed twice"),
        ("# nothing\n", "no device lines"),
    ],
)
def test_a_bad_limits_file_fails_closed(
    limiter: Limiter, tmp_path: Path, content: str, message: str
) -> None:
    limits = tmp_path / "limits"
    limits.write_text(content)
    run = limiter.run("alloc", "1Mi", extra={"GPUPOOL_LIMITS_FILE": str(limits)})
    assert run.rcs("alloc") == [CUDA_ERROR_OUT_OF_MEMORY]
    assert message in run.stderr


def test_a_missing_limits_file_falls_back_to_memory_limit(limiter: Limiter, tmp_path: Path) -> None:
    run = limiter.run("info", extra={"GPUPOOL_LIMITS_FILE": str(tmp_path / "absent")})
    assert run.first("info")["total"] == 64 * MI


def test_a_bad_memory_limit_fails_closed(limiter: Limiter) -> None:
    run = limiter.run("alloc", "1Mi", extra={"GPUPOOL_MEMORY_LIMIT": "12 gigs"})
    assert run.rcs("alloc") == [CUDA_ERROR_OUT_OF_MEMORY]
    assert "GPUPOOL_MEMORY_LIMIT" in run.stderr


def test_without_configuration_the_limiter_stays_out_of_the_way(limiter: Limiter) -> None:
    run = limiter.run("alloc", "1Gi", "info", "nvml", "0", extra={"GPUPOOL_MEMORY_LIMIT": ""})
    assert run.rcs("alloc") == [0]
    assert run.first("info")["total"] == FAKE_TOTAL
    assert run.first("nvml")["total"] == FAKE_TOTAL


# ---- when the limiter cannot tell the current device ----------------------------------------
# Without cuCtxGetDevice (or when it fails) the limiter does not know which card an allocation is
# for. One line in the limits leaves no doubt: cap against it. Several: refuse, never let it
# through uncapped.

NO_CTX_DEVICE = {"LD_LIBRARY_PATH": f"{FAKE_NO_CTX}:{FAKE}"}
CTX_DEVICE_FAILS = {"FAKE_CUDA_CTX_GET_DEVICE_ERROR": str(CUDA_ERROR_INVALID_CONTEXT)}
UNKNOWN_DEVICE = [NO_CTX_DEVICE, CTX_DEVICE_FAILS]
UNKNOWN_IDS = ["no cuCtxGetDevice", "cuCtxGetDevice fails"]


def limits_file(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "limits"
    path.write_text(text)
    return {"GPUPOOL_LIMITS_FILE": str(path), "FAKE_CUDA_DEVICES": "2"}


def test_the_fake_without_cuctxgetdevice_really_lacks_it(limiter: Limiter) -> None:
    # Guards the tests below against a vacuous pass: the no-ctx build is the one loaded, and it
    # neither exports cuCtxGetDevice nor hands it out through cuGetProcAddress.
    probe = subprocess.run(
        ["nm", "-D", "--defined-only", str(FAKE_NO_CTX / "libcuda.so.1")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "cuMemAlloc_v2" in probe.stdout
    assert "cuCtxGetDevice" not in probe.stdout


@pytest.mark.parametrize("unknown", UNKNOWN_DEVICE, ids=UNKNOWN_IDS)
def test_one_card_limit_is_enforced_when_the_device_is_unknown(
    limiter: Limiter, unknown: dict[str, str]
) -> None:
    run = limiter.run("alloc", "40Mi", "alloc", "40Mi", "info", extra=unknown)
    assert run.rcs("alloc") == [0, CUDA_ERROR_OUT_OF_MEMORY]
    assert run.first("info")["total"] == 64 * MI
    assert run.first("info")["free"] == 24 * MI


@pytest.mark.parametrize("unknown", UNKNOWN_DEVICE, ids=UNKNOWN_IDS)
def test_one_card_limits_file_by_uuid_is_enforced_when_the_device_is_unknown(
    limiter: Limiter, tmp_path: Path, unknown: dict[str, str]
) -> None:
    # The only line names the second card; the current context is on it (ctx 1), but the limiter
    # cannot ask. It must still cap against that one line rather than refuse or pass.
    env = limits_file(tmp_path, "GPU-fa4ec0de-0000-0000-0000-000000000001 64Mi\n") | unknown
    run = limiter.run("ctx", "1", "alloc", "48Mi", "alloc", "32Mi", "managed", "32Mi", extra=env)
    assert run.rcs("alloc") == [0, CUDA_ERROR_OUT_OF_MEMORY]
    assert run.rcs("managed") == [CUDA_ERROR_OUT_OF_MEMORY]


@pytest.mark.parametrize(
    ("unknown", "refused_with"),
    [(NO_CTX_DEVICE, CUDA_ERROR_OUT_OF_MEMORY), (CTX_DEVICE_FAILS, CUDA_ERROR_INVALID_CONTEXT)],
    ids=UNKNOWN_IDS,
)
def test_several_card_limits_fail_closed_when_the_device_is_unknown(
    limiter: Limiter, tmp_path: Path, unknown: dict[str, str], refused_with: int
) -> None:
    env = limits_file(tmp_path, "0 100Mi\n1 200Mi\n") | unknown
    run = limiter.run(
        "alloc", "1Mi", "async", "1Mi", "pool", "1Mi", "managed", "1Mi", "info", extra=env
    )
    assert run.rcs("alloc") + run.rcs("async") + run.rcs("managed") == [refused_with] * 3
    # A pool the program got from cuDeviceGetDefaultMemPool(0) is known to be on device 0.
    assert run.rcs("pool") == [0]
    assert run.first("info")["free"] == 0  # nothing can be allocated, and it says so
    # ... and says why, once, not once per refused call.
    assert run.stderr.count("cannot tell which device") == 1, run.stderr


def test_pool_allocations_are_charged_to_the_pools_device(limiter: Limiter, tmp_path: Path) -> None:
    # The current context is on device 0 (64Mi); device 1's pools take device 1's 200Mi.
    env = limits_file(tmp_path, "0 64Mi\n1 200Mi\n")
    run = limiter.run(
        "pool_dev", "1", "100Mi", "pool_new", "1", "80Mi", "pool_new", "0", "48Mi",
        "pool_dev", "0", "32Mi", "pool_new", "1", "32Mi", "nvml", "1", extra=env,
    )  # fmt: skip
    assert run.rcs("pool_dev") == [0, CUDA_ERROR_OUT_OF_MEMORY]
    assert run.rcs("pool_new") == [0, 0, CUDA_ERROR_OUT_OF_MEMORY]
    assert run.first("nvml")["used"] == 180 * MI


def test_a_host_memory_pool_is_not_charged_to_the_card(limiter: Limiter) -> None:
    run = limiter.run("pool_new", "host", "100Mi", "alloc", "64Mi")
    assert run.rcs() == [0, 0]


def test_pools_name_their_device_when_the_context_device_is_unknown(
    limiter: Limiter, tmp_path: Path
) -> None:
    env = limits_file(tmp_path, "0 64Mi\n1 200Mi\n") | NO_CTX_DEVICE
    run = limiter.run("pool_dev", "1", "150Mi", "pool_new", "1", "51Mi", "alloc", "1Mi", extra=env)
    assert run.rcs() == [0, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY]


def test_device_located_vmm_memory_is_capped_even_when_the_context_device_is_unknown(
    limiter: Limiter, tmp_path: Path
) -> None:
    # cuMemCreate names its device itself: no need to ask for the current one.
    env = limits_file(tmp_path, "0 64Mi\n1 200Mi\n") | NO_CTX_DEVICE
    run = limiter.run("create", "48Mi", "create", "32Mi", extra=env)
    assert run.rcs("create") == [0, CUDA_ERROR_OUT_OF_MEMORY]


def test_a_bad_limits_file_fails_closed_without_cuctxgetdevice(
    limiter: Limiter, tmp_path: Path
) -> None:
    env = limits_file(tmp_path, "0 12Gx\n") | NO_CTX_DEVICE
    assert limiter.run("alloc", "1Mi", extra=env).rcs() == [CUDA_ERROR_OUT_OF_MEMORY]


def test_without_configuration_and_without_cuctxgetdevice_everything_passes(
    limiter: Limiter,
) -> None:
    run = limiter.run("alloc", "1Gi", extra={"GPUPOOL_MEMORY_LIMIT": "", **NO_CTX_DEVICE})
    assert run.rcs() == [0]


def test_rtld_next_still_finds_the_next_library() -> None:
    # Interposing dlsym must not change what RTLD_NEXT means for the program's own libraries.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["LD_PRELOAD"] = str(LIB)
    done = subprocess.run([str(PROBE)], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.stdout.splitlines()[0] == "next=2"


@pytest.mark.parametrize("preload", [False, True], ids=["plain", "limited"])
def test_global_lookups_do_not_make_an_absent_driver_look_present(preload: bool) -> None:
    # gp_probe never loads libcuda or NVML; the limiter exports those names itself, but a global
    # dlsym must still say "not here", as it does without the limiter.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    env["LD_LIBRARY_PATH"] = str(FAKE)  # even with a driver installed
    env["GPUPOOL_MEMORY_LIMIT"] = "1Gi"
    if preload:
        env["LD_PRELOAD"] = str(LIB)
    done = subprocess.run([str(PROBE)], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.stdout.splitlines()[1:] == [
        "default_cuMemAlloc_v2=0",
        "default_nvmlDeviceGetMemoryInfo=0",
    ]


# ---- the source's shape ---------------------------------------------------------------------

SRC = NATIVE / "src"
# The units every other one may use, and which themselves use no other unit of the limiter.
LEAVES = {"log", "config", "region", "ptrtab"}


def project_includes(path: Path) -> set[str]:
    return set(re.findall(r'^#include "([^"]+)\.h"', path.read_text(), flags=re.MULTILINE))


def test_the_sources_include_graph_has_no_cycle() -> None:
    graph = {p.name: {f"{h}.h" for h in project_includes(p)} for p in SRC.glob("*.[ch]")}
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"include cycle: {' -> '.join((*path, node))}"
        if node in done:
            return
        for nxt in graph.get(node, ()):
            visit(nxt, (*path, node))
        done.add(node)

    for node in graph:
        visit(node, ())


@pytest.mark.parametrize("unit", sorted(LEAVES))
def test_the_leaf_units_need_only_their_own_header_and_the_log(unit: str) -> None:
    # gp_log used to live in hooks.c, so config, region and ptrtab depended on the hooks that
    # depend on them. Now they see only their own header, log.h and gp_base.h.
    allowed = {unit, "log", "gp_base"}
    assert project_includes(SRC / f"{unit}.c") <= allowed
    assert project_includes(SRC / f"{unit}.h") <= {"gp_base"}
