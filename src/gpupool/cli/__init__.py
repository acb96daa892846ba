"""gpupool.cli"""
