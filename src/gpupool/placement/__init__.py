"""gpupool.placement"""
