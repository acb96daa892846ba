"""The autoscaler's rule replayed over demand (`simulator.autoscale`): the same rule as the
controller, so the replay honours its bounds, ×2 cap and cooldown step by step; over the
built-in days it follows demand with fewer replica-hours than a deployment fixed at the
maximum; bad input is refused by kind; and `gpupool simulate autoscale` prints the summary."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from gpupool.cli.main import main
from gpupool.domain.errors import InputFileError
from gpupool.placement.autoscale import ScalePolicy
from gpupool.simulator.autoscale import (
    InvalidDemand,
    Sample,
    diurnal_demand,
    load_demand,
    replay_autoscale,
)


def test_the_replay_steps_within_the_rules_bounds_cap_and_cooldown() -> None:
    policy = ScalePolicy(max_replicas=10, min_replicas=1, cooldown_s=300.0)
    result = replay_autoscale(policy, diurnal_demand(), replicas=2, interval_s=15.0)
    changes = [
        (before, after)
        for before, after in zip(result.timeline, result.timeline[1:], strict=False)
        if after.replicas != before.replicas
    ]
    assert result.steps_up >= 2 and result.steps_down >= 2
    for before, after in changes:
        assert 1 <= after.replicas <= 10
        assert after.replicas <= 2 * before.replicas
    times = [after.t_s for _, after in changes]
    assert all(b - a >= 300.0 for a, b in itertools.pairwise(times))


def test_over_the_built_in_days_it_costs_less_than_a_fixed_maximum() -> None:
    result = replay_autoscale(ScalePolicy(max_replicas=12), diurnal_demand(), replicas=2)
    assert result.replica_hours < result.fixed_max_replica_hours
    assert max(p.replicas for p in result.timeline) > min(p.replicas for p in result.timeline)


def test_new_replicas_serve_only_after_their_start_up() -> None:
    series = [Sample(0.0, 1.9), Sample(3600.0, 1.9)]
    result = replay_autoscale(
        ScalePolicy(max_replicas=8), series, replicas=2, interval_s=10.0, startup_s=60.0
    )
    first_up = next(p for p in result.timeline if p.replicas > 2)
    assert first_up.serving == 2  # the new ones are still loading
    later = next(p for p in result.timeline if p.t_s >= first_up.t_s + 60.0)
    assert later.serving == later.replicas


@pytest.mark.parametrize(
    "series",
    [[], [Sample(10.0, 1.0), Sample(5.0, 1.0)], [Sample(0.0, -1.0)]],
)
def test_bad_demand_is_refused(series: list[Sample]) -> None:
    with pytest.raises(InvalidDemand):
        replay_autoscale(ScalePolicy(max_replicas=4), series, replicas=1)


def test_a_demand_file_that_does_not_parse_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "demand.csv"
    path.write_text("t_s,demand\n0,1.0\n60,lots\n")
    with pytest.raises(InputFileError, match=":3"):
        load_demand(str(path))


def test_the_command_prints_the_summary_and_writes_the_timeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demand = tmp_path / "demand.csv"
    demand.write_text("t_s,demand\n0,0.5\n1800,3.5\n5400,0.2\n9000,0.2\n")
    out = tmp_path / "replay.json"
    code = main(["simulate", "autoscale", "--demand", str(demand), "--max-replicas", "6",
                 "--cooldown", "120", "--json", str(out)])  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps_up"] >= 1 and summary["steps_down"] >= 1
    saved = json.loads(out.read_text())
    assert saved["summary"] == summary and saved["timeline"][0]["serving"] == 2
    assert main(["simulate", "autoscale", "--min-replicas", "5", "--max-replicas", "3"]) == 2
