"""gpupool.controllers"""
