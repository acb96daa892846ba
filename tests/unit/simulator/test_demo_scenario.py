"""The built-in demo's data (`simulator/demo/`): the simulator replays it and shows what the live
demo shows (research borrows, and is reclaimed when ads comes back), and each task becomes a pod
the webhook's parser reads back as the same GPU request."""

from __future__ import annotations

from gpupool.adapters.wire.pods import read_pod_gpu
from gpupool.devcluster.demo import pod_object, quota_objects
from gpupool.quota.resource import Resource
from gpupool.simulator.demo_scenario import demo_timeline, load_demo
from gpupool.simulator.replay_experiment import ReplayConfig, run_experiment


def test_the_demo_loads_with_its_four_tenants_and_three_steps() -> None:
    demo = load_demo()
    assert [r.quota.name for r in demo.tenancy.rules] == ["search", "lab", "research", "ads"]
    assert demo.tenancy.resource is Resource.GPU
    assert [s.at_s for s in demo.steps] == [0.0, 20.0, 50.0]
    assert {r.tenant for r in demo.requests} == {"search", "lab", "research", "ads"}
    assert demo.end_s >= demo.steps[-1].at_s


def test_replaying_the_demo_borrows_and_reclaims_only_with_borrowing() -> None:
    demo = load_demo()
    config = ReplayConfig(policy="gpupool", time_scale=1.0, cluster_fraction=1.0)
    result = run_experiment(list(demo.nodes), demo_timeline(demo), demo.tenancy, config)
    borrowing = result.runs["pooled-borrowing"]
    assert borrowing.reclaims >= 1
    assert result.runs["pooled"].reclaims == 0


def test_each_task_is_a_pod_asking_for_what_the_task_asks() -> None:
    for req in load_demo().requests:
        pod = pod_object(req)
        assert pod["metadata"]["namespace"] == req.tenant
        parsed = read_pod_gpu(pod, tenant=req.tenant)
        assert parsed is not None, req.name
        got = parsed.request
        assert (got.gpu_count, got.gpu_memory_bytes, got.compute_pct) == (
            req.gpu_count,
            req.gpu_memory_bytes,
            req.compute_pct,
        ), req.name


def test_a_gpu_quota_is_written_in_milli_gpus() -> None:
    rule = load_demo().tenancy.rules[0]
    namespace, quota = quota_objects(rule.quota)
    assert namespace["metadata"]["labels"] == {"gpupool.io/tenant": "search"}
    assert quota["spec"]["resource"] == "gpu"
    assert quota["spec"]["nominal"] == f"{rule.quota.nominal}m"
    assert quota["spec"]["cohort"] == "pool"
