"""bench/api_requests.py: requests counted from the API server's /metrics, labels by name."""

from __future__ import annotations

from support.bench import bench_module

api_requests = bench_module("api_requests")

METRICS = """\
# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="200",component="apiserver",resource="pods",verb="LIST"} 3
apiserver_request_total{verb="LIST",resource="pods",code="500",component="apiserver"} 2
apiserver_request_total{code="200",resource="pods",subresource="binding",verb="POST"} 7
apiserver_request_total{code="0",resource="nodes",verb="WATCH"} 1.0e+00
apiserver_request_duration_seconds_count{resource="pods",verb="LIST"} 99
"""


def test_counts_sum_codes_and_read_labels_in_any_order() -> None:
    counts = api_requests.request_counts(METRICS)
    assert counts == {("LIST", "pods"): 5, ("POST", "pods/binding"): 7, ("WATCH", "nodes"): 1}
