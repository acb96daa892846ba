"""gpupool.quota"""
