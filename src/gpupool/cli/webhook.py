"""`gpupool webhook`: the admission webhook (wiring only; the code is in adapters.webhook)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from gpupool.adapters.metrics.http import parse_address
from gpupool.adapters.webhook import register as registration
from gpupool.adapters.webhook.certs import ensure_serving_cert
from gpupool.adapters.webhook.mutate import DEFAULT_SCHEDULER
from gpupool.adapters.webhook.runner import WebhookConfig, run_webhook
from gpupool.cli.daemon import configure_logging, run_loop, stop_on_signals

DEFAULT_METRICS_ADDRESS = ":9412"


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE; got {text!r}")
    return key, value


def _service(text: str) -> tuple[str, str, int]:
    parts = text.split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME/PORT; got {text!r}")
    return parts[0], parts[1], int(parts[2])


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "webhook",
        help="the admission webhook: GPU pod validation, tenant, vgpu and the quota gate",
    )
    commands = parser.add_subparsers(dest="webhook_command", metavar="COMMAND", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve the webhook over HTTPS (and register it with the apiserver)",
        description=(
            "Validates and normalises pods that ask for gpupool.io/gpu-memory, "
            "gpupool.io/gpu-compute or gpupool.io/gpu, stamps the tenant from the namespace "
            "label gpupool.io/tenant, adds gpupool.io/vgpu and the gpupool.io/quota scheduling "
            "gate; refuses annotations only gpupool writes; validates GpuQuota objects. "
            "(What gpupool stamped is kept on update by the ValidatingAdmissionPolicy in "
            "deploy/policies, which needs no webhook.)"
        ),
    )
    serve.add_argument("--host", default="0.0.0.0", help="address to listen on")
    serve.add_argument("--port", type=int, default=9443, help="port (default: 9443)")
    serve.add_argument(
        "--cert-dir",
        type=Path,
        default=Path("/var/run/gpupool/webhook-certs"),
        help="folder for ca.crt, tls.crt, tls.key (made when missing)",
    )
    serve.add_argument(
        "--cert-host",
        action="append",
        default=[],
        help="a DNS name or IP the serving certificate covers (repeatable; "
        "default: 127.0.0.1, localhost)",
    )
    serve.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: in-cluster, ...)")
    serve.add_argument(
        "--register-url",
        help="register the webhook at this https URL (e.g. https://127.0.0.1:9443)",
    )
    serve.add_argument(
        "--register-service",
        type=_service,
        metavar="NAMESPACE/NAME/PORT",
        help="register the webhook behind this Service",
    )
    serve.add_argument(
        "--namespace-label",
        type=_label,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only namespaces with this label go to the webhook (repeatable)",
    )
    serve.add_argument(
        "--skip-namespace",
        action="append",
        default=[],
        help="a namespace never sent to the webhook, e.g. its own (kube-system always is)",
    )
    serve.add_argument(
        "--unregister-on-exit",
        action="store_true",
        help="delete the webhook configurations when stopping (dev clusters and tests)",
    )
    serve.add_argument("--name", default=registration.NAME, help="webhook configurations' name")
    serve.add_argument(
        "--scheduler-name",
        action="append",
        default=[],
        help="a schedulerName whose kube-scheduler calls gpupool's extender (repeatable; "
        f"default: {DEFAULT_SCHEDULER}); GPU pods for any other scheduler are refused",
    )
    serve.add_argument(
        "--adopt-nvidia-gpu",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve pods that ask for nvidia.com/gpu as gpupool pods of whole cards (gated, "
        "leased, counted) and refuse nvidia.com/mig-* profiles; --no-adopt-nvidia-gpu leaves "
        "them to NVIDIA's device plugin, for clusters where it serves other nodes "
        "(docs/hami.md; default: adopt)",
    )
    serve.add_argument(
        "--metrics-address",
        default=DEFAULT_METRICS_ADDRESS,
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here over plain HTTP (requests, latency, denials by "
        f"reason; docs/metrics.md); 'off' serves none (default: {DEFAULT_METRICS_ADDRESS})",
    )
    serve.add_argument("--log-level", default="INFO")
    serve.set_defaults(func=run_serve)

    configs = commands.add_parser(
        "configs", help="print the webhook configurations as YAML (with the CA bundle)"
    )
    configs.add_argument("--cert-dir", type=Path, required=True)
    configs.add_argument("--cert-host", action="append", default=[])
    configs.add_argument("--url")
    configs.add_argument("--service", type=_service, metavar="NAMESPACE/NAME/PORT")
    configs.add_argument("--adopt-nvidia-gpu", action=argparse.BooleanOptionalAction, default=True)
    configs.set_defaults(func=run_configs)


def _config(args: argparse.Namespace) -> WebhookConfig:
    return WebhookConfig(
        host=args.host,
        port=args.port,
        cert_dir=args.cert_dir,
        cert_hosts=tuple(args.cert_host) or ("127.0.0.1", "localhost"),
        kubeconfig=args.kubeconfig,
        register_url=args.register_url,
        register_service=args.register_service,
        namespace_labels=dict(args.namespace_label),
        skip_namespaces=("kube-system", *args.skip_namespace),
        unregister_on_exit=args.unregister_on_exit,
        name=args.name,
        schedulers=tuple(args.scheduler_name) or (DEFAULT_SCHEDULER,),
        metrics=None if args.metrics_address == "off" else parse_address(args.metrics_address),
        adopt_nvidia_gpu=args.adopt_nvidia_gpu,
    )


def run_serve(args: argparse.Namespace) -> int:
    try:
        config = _config(args)
    except ValueError as err:
        print(f"gpupool webhook serve: error: --metrics-address: {err}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)

    async def main() -> None:
        stop = stop_on_signals()
        await run_webhook(config, stop)

    run_loop(main())
    return 0


def run_configs(args: argparse.Namespace) -> int:
    if not (args.url or args.service):
        print("gpupool webhook configs: error: give --url or --service", file=sys.stderr)
        return 2
    cert = ensure_serving_cert(args.cert_dir, tuple(args.cert_host) or ("127.0.0.1", "localhost"))
    reg = registration.Registration(
        registration.Target(args.url, args.service),
        cert.ca_bundle(),
        adopt_nvidia_gpu=args.adopt_nvidia_gpu,
    )
    print(yaml.safe_dump_all(registration.configurations(reg), sort_keys=False), end="")
    return 0
