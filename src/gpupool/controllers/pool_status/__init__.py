"""GpuPool status: capacity, allocated, fragmentation and the cards over the pool's threshold."""
