"""gpupool.adapters"""
