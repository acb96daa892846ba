"""gpupool.simulator"""
