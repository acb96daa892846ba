"""`gpupool usage`'s sums (quota.usage) and its command line: a lease counts for the part of its
holding inside the period, rows group by tenant, namespace or pod, card-equivalents from the
slice's share of its card, and bad input gets one message that says what to write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupool.cli.main import main
from gpupool.cli.usage import as_table, read_when
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.quota.usage import Held, UsageBy, usage
from gpupool.rfc3339 import format_time
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.usage import held_of

H = 3600.0
T0 = 1_767_225_600.0


def _held(tenant: str, ns: str, pod: str, gib: int, start: float, end: float | None) -> Held:
    return Held(tenant, ns, pod, gib * GiB, 1000, T0 + start, None if end is None else T0 + end)


HELD = [
    _held("a", "a-web", "p1", 10, 0, 2 * H),  # two hours
    _held("a", "a-web", "p2", 20, H, None),  # from hour 1, still held
    _held("a", "a-batch", "p3", 40, -H, 0.5 * H),  # began before the period
    _held("b", "b", "p4", 8, 5 * H, 6 * H),  # after the period
]


def test_a_lease_counts_for_its_part_of_the_period_and_rows_group_as_asked() -> None:
    by_tenant = usage(HELD, T0, T0 + 3 * H, UsageBy.TENANT)
    [a] = by_tenant  # b held nothing in the period: no row
    assert (a.tenant, a.namespace, a.pod, a.leases) == ("a", "", "", 3)
    assert a.gib_hours == pytest.approx(10 * 2 + 20 * 2 + 40 * 0.5)
    assert a.gpu_hours == pytest.approx(2 + 2 + 0.5)
    by_ns = {r.namespace: r.gib_hours for r in usage(HELD, T0, T0 + 3 * H, UsageBy.NAMESPACE)}
    assert by_ns == pytest.approx({"a-web": 60.0, "a-batch": 20.0})
    by_pod = usage(HELD, T0, T0 + 3 * H, UsageBy.POD)
    assert [(r.namespace, r.pod) for r in by_pod] == [("a-batch", "p3"), ("a-web", "p1"),
                                                      ("a-web", "p2")]  # fmt: skip
    assert "TOTAL" in as_table(by_pod, UsageBy.POD).splitlines()[-1]


def test_a_slice_counts_its_share_of_the_card_as_gpu_hours() -> None:
    lease = LeaseRecord(
        name="uid-p", namespace="ns", tenant="a", pod=PodRef("ns", "p", "uid-p"), node="n1",
        slices=(Slice(0, "GPU-0", "A100-80GB", 0, 20 * GiB, 0),
                Slice(1, "GPU-1", "A100-80GB", 0, 80 * GiB, 0)),
        start=T0, end=T0 + H,
    )  # fmt: skip
    held = held_of(lease, T0 + 2 * H)
    assert held.gpu_milli == 250 + 1000  # a quarter of the first card, all of the second
    [row] = usage([held], 0, T0 + 2 * H, UsageBy.POD)
    assert row.gib_hours == pytest.approx(100.0) and row.pod == "p"


def test_periods_read_rfc3339_and_spans_before_now() -> None:
    assert read_when("24h", T0, "--since") == T0 - 24 * H
    assert read_when("30d", T0, "--since") == T0 - 30 * 24 * H
    assert read_when(format_time(T0), 0.0, "--until") == T0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"], "--since takes an RFC 3339 time"),
        (["--since", "1h", "--until", "2h"], "must be before --until"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "leases.json"
    file.write_text(json.dumps({"items": []}))
    assert main(["usage", "--from-file", str(file), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_file_that_holds_no_gpuleases_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "leases.json"
    file.write_text("{not json\n")
    assert main(["usage", "--from-file", str(file)]) == 2
    assert "neither JSON" in capsys.readouterr().err
    assert main(["usage", "--from-file", str(tmp_path / "absent.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
