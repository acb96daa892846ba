"""The web view's CPU on a running dev cluster, two versions side by side; prints JSON.

    .venv/bin/python bench/web_idle.py --dir DEV_CLUSTER_DIR --before-rev REV
        [--window 60] [--settle 20] [--pods 0] [--page] [--out bench/results/NAME.json]

Two `gpupool web` processes read the same cluster at the same time with the web view's own
identity (the dev cluster's `gpupool-web` kubeconfig): `before`, the source tree of git revision
`--before-rev` (exported to a temporary folder), and `after`, this checkout's. Each keeps its own
watch cache, so both hear the same changes. With `--pods N`, N pods of 4 GiB (one tenant, a
GpuQuota that admits them all) are created first and waited for until Running, so the pool map
holds slices.

Measured (bench/proc_usage.py, /proc): each process's CPU seconds per minute and RSS over
`--window` seconds after `--settle` seconds, with no page open (`idle`); with `--page`, the same
again while one operator page follows each one's live stream (`page`: the server-sent events
each sent, and their bytes). Beside them, what the cluster did in the window: the watched
changes a third watch cache (the web view's kinds) heard, by kind, and those that were more than
a heartbeat. The load average at the start and the end says how busy the machine was.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from emit import emit
from proc_usage import UsageWindow

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.noise import only_heartbeat
from gpupool.adapters.kubernetes.watch_cache import WatchCache
from gpupool.cli.web import WEB_KINDS
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.demo import quota_objects
from gpupool.domain.units import GiB
from gpupool.quota.spec import TenantQuota
from gpupool.state.objects import Change

ROOT = Path(__file__).resolve().parents[1]
TENANT = "webidle"


def export(rev: str, into: Path) -> Path:
    """The `src` folder of git revision `rev`, written under `into`."""
    archive = into / "src.tar"
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--output", str(archive), rev, "src"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def web(src: Path, kubeconfig: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    argv = [
        sys.executable, "-m", "gpupool.cli.main", "web", "--kubeconfig", str(kubeconfig),
        "--host", "127.0.0.1", "--port", str(port), "--dev-insecure",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(src)}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the web view on :{port} exited ({proc.returncode}); see its log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"the web view on :{port} was not healthy within {timeout_s:.0f}s")


def make_pods(api: KubeApi, count: int, timeout_s: float) -> int:
    """`count` 4 GiB pods of one tenant; how many were Running within `timeout_s`."""
    namespace, quota = quota_objects(TenantQuota(name=TENANT, nominal=count * 8 * GiB))
    api.create("/api/v1/namespaces", namespace)
    api.create("/apis/gpupool.io/v1alpha1/gpuquotas", quota)
    for i in range(count):
        api.create(
            f"/api/v1/namespaces/{TENANT}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"slice-{i:04d}", "namespace": TENANT},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {"gpupool.io/gpu-memory": "4Gi"}},
                        }
                    ]
                },
            },
        )
    deadline = time.monotonic() + timeout_s
    running = 0
    while time.monotonic() < deadline:
        items = api.get(f"/api/v1/namespaces/{TENANT}/pods")["items"]
        running = sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running")
        if running >= count:
            break
        time.sleep(2)
    return running


class Changes:
    """What the cluster changed in the window, heard by a watch cache of the web view's kinds."""

    def __init__(self, kubeconfig: Path) -> None:
        self.client = async_client(kubeconfig, field_manager="bench-web-idle")
        self.cache = WatchCache(self.client, WEB_KINDS)
        self.counting = False
        self.all: collections.Counter[str] = collections.Counter()
        self.shown: collections.Counter[str] = collections.Counter()
        for reflector in self.cache.reflectors.values():
            reflector.changed = self._heard

    def _heard(self, change: Change) -> None:
        if self.counting:
            self.all[change.kind] += 1
            if not only_heartbeat(change):
                self.shown[change.kind] += 1


async def follow(port: int, stop: asyncio.Event, tally: dict[str, int]) -> None:
    """One operator page's live stream: counts its events and bytes until `stop`."""
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/api/v1/events") as resp,
    ):
        pending = asyncio.ensure_future(stop.wait())
        while not stop.is_set():
            read = asyncio.ensure_future(resp.content.readany())
            done, _ = await asyncio.wait({read, pending}, return_when=asyncio.FIRST_COMPLETED)
            if read not in done:
                read.cancel()
                break
            chunk = read.result()
            if not chunk:
                break
            tally["bytes"] = tally.get("bytes", 0) + len(chunk)
            tally["events"] = (
                tally.get("events", 0)
                + chunk.count(b"\nevent: ")
                + (1 if chunk.startswith(b"event: ") else 0)
            )


async def window(
    pids: dict[str, int], seconds: float, changes: Changes, ports: dict[str, int] | None
) -> dict[str, Any]:
    stop = asyncio.Event()
    tallies: dict[str, dict[str, int]] = {name: {} for name in pids}
    followers = []
    if ports is not None:
        followers = [asyncio.ensure_future(follow(ports[n], stop, tallies[n])) for n in pids]
        await asyncio.sleep(5)  # the first (whole) state is sent: count what follows it
        for tally in tallies.values():
            tally.clear()
    changes.all.clear()
    changes.shown.clear()
    changes.counting = True
    usage = UsageWindow(pids)
    await asyncio.sleep(seconds)
    out = usage.finish()
    changes.counting = False
    stop.set()
    await asyncio.gather(*followers, return_exceptions=True)
    minutes = seconds / 60
    out["changes_per_min"] = {k: round(v / minutes, 1) for k, v in sorted(changes.all.items())}
    out["changes_not_heartbeats_per_min"] = {
        k: round(v / minutes, 1) for k, v in sorted(changes.shown.items())
    }
    if ports is not None:
        out["page_stream"] = tallies
    return out


async def measure(args: argparse.Namespace, pids: dict[str, int], ports: dict[str, int]) -> Any:
    changes = Changes(args.dir / "kubeconfig")
    stop = asyncio.Event()
    task = asyncio.ensure_future(changes.cache.run(stop))
    await asyncio.gather(*(r.synced.wait() for r in changes.cache.reflectors.values()))
    await asyncio.sleep(args.settle)
    result = {"idle": await window(pids, args.window, changes, None)}
    if args.page:
        result["page"] = await window(pids, args.window, changes, ports)
    stop.set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await changes.client.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, required=True, help="a running dev cluster's folder")
    parser.add_argument("--before-rev", required=True, help="git revision of the `before` run")
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--pods", type=int, default=0)
    parser.add_argument("--page", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    state = json.loads((args.dir / "state.json").read_text())
    identity = args.dir / "pki" / "identities" / "gpupool-web.kubeconfig"
    pki = args.dir / "pki"
    nodes = KubeApi(state["server"], pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
    result: dict[str, Any] = {
        "benchmark": "web view CPU, two versions side by side on one dev cluster",
        "command": " ".join(sys.argv),
        "before_rev": args.before_rev,
        "after_rev": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip() + ("+changes" if subprocess.run(
            ["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--", "src"], check=False
        ).returncode else ""),
        "nodes": len(nodes.get("/api/v1/nodes")["items"]),
        "server": state["server"],
        "cpus": os.cpu_count(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip
    if args.pods:
        result["pods_running"] = make_pods(nodes, args.pods, timeout_s=600)
    with tempfile.TemporaryDirectory(prefix="web-idle-") as tmp:
        before_src = export(args.before_rev, Path(tmp))
        ports = {"before": free_port(), "after": free_port()}
        logs = {name: Path(tmp) / f"{name}.log" for name in ports}
        with (
            web(before_src, identity, ports["before"], logs["before"]) as before,
            web(ROOT / "src", identity, ports["after"], logs["after"]) as after,
        ):
            procs = {"before": before, "after": after}
            for name, proc in procs.items():
                wait_healthy(ports[name], proc, timeout_s=600)
            pids = {name: proc.pid for name, proc in procs.items()}
            result.update(asyncio.run(measure(args, pids, ports)))
    result["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    emit(result, args.out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
