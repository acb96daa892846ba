"""Whether the node's container runtime applies the CDI devices the kubelet hands it (pure).

The DRA API gives the runtime only CDI device IDs: the limiter's mount and preload, the slice's
limits file and `NVIDIA_VISIBLE_DEVICES` all reach the container through the CDI spec the
driver writes. A runtime that ignores CDI drops them without an error, and a CUDA image whose
own environment says `NVIDIA_VISIBLE_DEVICES=all` then sees every card of the node, uncapped.
So the driver serves only on a runtime known to apply CDI, read from the kubelet's own report
(`Node.status.nodeInfo.containerRuntimeVersion`, such as `containerd://2.0.5`):
- containerd 2.0 or newer (CDI on by default);
- CRI-O 1.23 or newer (CDI on by default).
containerd 1.7 applies CDI only with `enable_cdi = true` in its CRI config, which nothing in
the API shows, and older containerd not at all: both refused, as is any other runtime.
"""

from __future__ import annotations

import re

# runtime name -> the first (major, minor) that applies CDI by default
CDI_SINCE = {"containerd": (2, 0), "cri-o": (1, 23)}
_VERSION = re.compile(r"v?(\d+)\.(\d+)")


def cdi_refusal(runtime_version: str) -> str | None:
    """None when the runtime applies CDI specs; else why the DRA driver will not serve here."""
    name, _, version = runtime_version.strip().partition("://")
    since = CDI_SINCE.get(name.lower())
    supported = "containerd 2.0 or newer, or CRI-O 1.23 or newer"
    if since is None:
        return (
            f"the node's container runtime {runtime_version!r} is not one gpupool knows to apply "
            f"CDI devices, and without them a claim's container would run without the limiter; "
            f"gpupool's DRA driver needs {supported}"
        )
    found = _VERSION.match(version)
    if found is None:
        return (
            f"the node's container runtime version {runtime_version!r} cannot be read; gpupool's "
            f"DRA driver needs {supported}"
        )
    major, minor = int(found.group(1)), int(found.group(2))
    if (major, minor) >= since:
        return None
    if name.lower() == "containerd" and (major, minor) == (1, 7):
        return (
            f"containerd {major}.{minor} applies CDI devices only with enable_cdi = true in its "
            f"CRI config, which gpupool cannot see; without them a claim's container would run "
            f"without the limiter. Upgrade the node to containerd 2.0 or newer"
        )
    return (
        f"{name} {major}.{minor} does not apply CDI devices, so a claim's container would run "
        f"without the limiter; gpupool's DRA driver needs {supported}"
    )
