"""gpupool.state"""
