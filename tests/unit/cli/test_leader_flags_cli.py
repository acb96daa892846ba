"""The replicated daemons refuse leader-election flags that cannot work, with the flag to fix."""

from __future__ import annotations

import pytest

from gpupool.cli.main import main


@pytest.mark.parametrize("command", ["extender", "controller"])
def test_renew_deadline_not_below_the_lease_is_refused(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, "--leader-elect", "--leader-lease-seconds", "5"]
    argv += ["--leader-renew-deadline-seconds", "6"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"gpupool {command}: error:" in err
    assert "--leader-renew-deadline-seconds must be below --leader-lease-seconds" in err
