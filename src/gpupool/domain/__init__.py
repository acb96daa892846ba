"""gpupool.domain"""
