"""GiB-hour (GPU-hour) budgets, live: the meter from the GpuLeases, the GpuQuota status fields."""
