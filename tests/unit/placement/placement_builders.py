"""Builders for nodes, requests and snapshots in placement tests."""

from __future__ import annotations

from gpupool.domain import GiB, Gpu, Node, Request, uniform_node
from gpupool.placement import ClusterSnapshot, Decision, Planner, TargetWorkload


def node(
    name: str = "n0",
    gpus: int = 8,
    model: str = "A100-80GB",
    cpu: int = 64_000,
    mem: int = 512 * 1024,
    nvlink: bool = False,
    numa: int = 1,
) -> Node:
    return uniform_node(
        name,
        cpu_milli=cpu,
        memory_mib=mem,
        gpu_count=gpus,
        model=model,
        nvlink=nvlink,
        numa_nodes=numa,
    )


def share(name: str = "p", milli: int = 500, cpu: int = 1000, **kw: object) -> Request:
    return Request(name=name, cpu_milli=cpu, gpu_count=1, gpu_milli=milli, **kw)  # type: ignore[arg-type]


def slice_gib(
    name: str = "p", gib: float = 12, compute: int | None = None, **kw: object
) -> Request:
    return Request(
        name=name,
        cpu_milli=1000,
        gpu_count=1,
        gpu_memory_bytes=int(gib * GiB),
        compute_pct=compute,
        **kw,  # type: ignore[arg-type]
    )


def whole(name: str = "w", gpus: int = 1, cpu: int = 1000, **kw: object) -> Request:
    return Request(name=name, cpu_milli=cpu, gpu_count=gpus, **kw)  # type: ignore[arg-type]


def cpu_only(name: str = "c", cpu: int = 4000) -> Request:
    return Request(name=name, cpu_milli=cpu)


def place(
    snap: ClusterSnapshot,
    req: Request,
    policy: str = "binpack",
    workload: TargetWorkload | None = None,
) -> Decision:
    result = Planner(policy, workload).plan(snap, req)
    assert isinstance(result, Decision), getattr(result, "message", result)
    snap.assume(result)
    return result


def mixed_node(name: str, models: list[str]) -> Node:
    return Node(
        name=name,
        cpu_milli=64_000,
        memory_mib=512 * 1024,
        gpus=tuple(Gpu(index=i, model=m, uuid=f"{name}-{i}") for i, m in enumerate(models)),
    )


def occupy(snap: ClusterSnapshot, node_name: str, card: int, gib: float) -> Decision:
    """Reserve `gib` on one named card, bypassing the policy."""
    req = Request(
        name=f"fill-{node_name}-{card}-{snap.allocated_gpu_milli()}",
        gpu_count=1,
        gpu_memory_bytes=int(gib * GiB),
    )
    i = snap.index[node_name]
    d = Decision(
        req,
        i,
        node_name,
        (card,),
        (int(gib * GiB),),
        (0,),
        (int(snap.gmem_total[i, card] - snap.gmem_free[i, card]),),
        0.0,
    )
    snap.assume(d)
    return d
