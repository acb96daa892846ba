"""The kubelet device plugin for gpupool.io/vgpu (gRPC v1beta1 over unix sockets)."""
