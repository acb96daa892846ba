"""The admission webhook's series: requests by resource, operation and result, their latency,
and denials by reason (the kind of bad input: the GpupoolError subclass the check raised, or
why the webhook could not judge).

Served on its own plain-HTTP address (`gpupool webhook serve --metrics-address`, :9412 by
default), apart from the HTTPS port the API server calls, as the agent's and the controller's.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# The API server waits at most the webhook's timeoutSeconds (10 s by default) for an answer.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RESULTS = ("allowed", "denied", "error", "malformed")


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "gpupool_webhook_requests",
            "AdmissionReviews answered, by resource (pods, gpuquotas), operation and result: "
            "allowed, denied (bad input, or the webhook could not judge), error (a bug in the "
            "webhook, answered as a denial), malformed (not an AdmissionReview: HTTP 400)",
            ["resource", "operation", "result"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpupool_webhook_request_duration_seconds",
            "Time from an AdmissionReview's arrival to its answer, by resource",
            ["resource"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.denials = Counter(
            "gpupool_webhook_denials",
            "Requests denied, by resource and reason (the kind of bad input, or "
            "NamespaceUnreadable, InternalError)",
            ["resource", "reason"],
            registry=self.registry,
        )

    def answered(
        self, resource: str, operation: str, result: str, seconds: float, reason: str | None
    ) -> None:
        self.requests.labels(resource, operation or "unknown", result).inc()
        self.latency.labels(resource).observe(seconds)
        if reason is not None:
            self.denials.labels(resource, reason).inc()
