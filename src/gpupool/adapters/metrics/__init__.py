"""Prometheus /metrics for the agent (physical + logical layers) and the controller (quota layer).

prometheus_client lives here and in the extender's server only; the pure core never sees it.
Names are `gpupool_<layer>_*`; docs/metrics.md lists every series.
"""
