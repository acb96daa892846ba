"""The scheduler extender: HTTP /filter, /prioritize and /bind over the shared `gpupool.state`."""
