# The gpupool image: one image for every component (extender, controller, webhook, agent) and
# the in-container limiter that the agent's init container copies onto each GPU node.
#
#   docker build -t gpupool:0.1.0 .      (the tag deploy/install/*.yaml use; push it to your
#                                          registry and change the image there)
#
# Not built in gpupool's own CI or tests: the machine they run on has no container engine. The
# manifests' paths and flags are checked against this file by tests/unit/deploy.

# ---- the limiter (C): plain gnu11 + glibc, no CUDA toolkit needed (native/README.md) --------
FROM python:3.11-slim AS limiter
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make \
 && rm -rf /var/lib/apt/lists/*
COPY native/ /src/native/
RUN make -C /src/native CC=gcc all

# ---- the Python package, with the dependency versions pinned in pyproject.toml ------------------
FROM python:3.11-slim AS wheels
COPY pyproject.toml README.md /src/
COPY src/ /src/src/
RUN pip wheel --no-cache-dir --wheel-dir /wheels /src

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=wheels /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels gpupool \
 && rm -rf /wheels
# `gpupool limiter path` finds it here; the agent DaemonSet's init container copies it to the
# same path on the host, where the device plugin mounts it into GPU containers from
# (PluginPaths.limiter_host, `gpupool agent --limiter-path`).
COPY --from=limiter /src/native/build/libgpupool.so /usr/local/lib/gpupool/libgpupool.so
# The services run as this user (runAsNonRoot in the manifests); the agent runs as root.
USER 65532:65532
ENTRYPOINT ["gpupool"]
