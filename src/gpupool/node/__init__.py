"""The node side of gpupool, apart from the cluster's controllers: the agent (`agent`: device
plugin, health following, the GpuNode heartbeat), the kubelet device plugin (`device_plugin`)
and the cards' discovery (`nvml`). It talks to the cluster only through `gpupool.ports`
(implemented in `adapters.kubernetes`)."""
