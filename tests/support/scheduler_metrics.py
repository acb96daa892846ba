"""kube-scheduler's own count of its tries, read from its /metrics (open on the loopback,
self-signed). A refusal repeated with the same text is one event series whose count
kube-scheduler writes back only every 30 minutes, so tests that wait for "its next try" read
`scheduler_schedule_attempts_total{result="unschedulable"}` instead of counting events."""

from __future__ import annotations

import ssl
import urllib.request

METRIC = "scheduler_schedule_attempts_total{"


def unschedulable_attempts(port: int) -> float:
    """The unschedulable attempts kube-scheduler at 127.0.0.1:`port` has made so far."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    with opener.open(f"https://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(METRIC) and 'result="unschedulable"' in line
    )
