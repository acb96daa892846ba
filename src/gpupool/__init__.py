"""gpupool: the GPUs of a Kubernetes cluster as one pool, drawn from by the slice."""

__version__ = "0.1.0"
