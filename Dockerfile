# The gpupool image: one image for every component (extender, controller, webhook, agent) and
# the in-container limiter that the agent's init container copies onto each GPU node.
#
#   docker build -t gpupool:0.1.0 .         (from the public python:3.11-slim; push it to your
#                                            registry and set image.repository in the chart)
#   tools/image/build.sh                    (here, with buildah, from a Debian base built locally
#                                            with mmdebstrap: --build-arg BASE=...; docs/install.md)
#
# BASE is any Debian-like image with python3 (>= 3.11, with the venv module), apt-get and sh:
# the official python:3.11-slim, or a bookworm rootfs with python3, python3-venv, python3-pip and
# ca-certificates. gpupool is installed into a venv (/opt/gpupool) so that Debian's own python3
# (PEP 668: "externally managed") and the official image's behave the same.
ARG BASE=python:3.11-slim

# ---- the limiter (C): plain gnu11 + glibc, no CUDA toolkit needed (native/README.md) --------
FROM ${BASE} AS limiter
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make \
 && rm -rf /var/lib/apt/lists/*
COPY native/ /src/native/
RUN make -C /src/native CC=gcc all

# ---- the Python package, with the dependency versions pinned in pyproject.toml ------------------
FROM ${BASE} AS wheels
COPY pyproject.toml README.md /src/
COPY src/ /src/src/
# pip's cache outlives the build (a cache mount, not a layer): a change under src/ downloads
# nothing again.
RUN --mount=type=cache,target=/root/.cache/pip python3 -m pip wheel --wheel-dir /wheels /src

FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/gpupool/bin:$PATH
COPY --from=wheels /wheels /wheels
RUN python3 -m venv /opt/gpupool \
 && /opt/gpupool/bin/pip install --no-cache-dir --no-index --find-links /wheels gpupool \
 && rm -rf /wheels
# `gpupool limiter path` finds it here; the agent DaemonSet's init container copies it to the
# same path on the host, where the device plugin mounts it into GPU containers from
# (PluginPaths.limiter_host, `gpupool agent --limiter-path`).
COPY --from=limiter /src/native/build/libgpupool.so /usr/local/lib/gpupool/libgpupool.so
# The services run as this user (runAsNonRoot in the chart); the agent runs as root.
USER 65532:65532
ENTRYPOINT ["gpupool"]
