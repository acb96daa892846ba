"""gpupool's Kubernetes adapter: the CRDs, typed conversions between objects and domain values,
and the lightkube client glue. Conversions are pure functions over decoded JSON (one noun per
module); only `client`, `crds`, `informer`, `leases_source` and `reporter` talk to the API server.
"""

GROUP = "gpupool.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Pod resources and annotations (DESIGN section 3).
GPU_MEMORY = "gpupool.io/gpu-memory"
GPU_COMPUTE = "gpupool.io/gpu-compute"
GPU_COUNT = "gpupool.io/gpu"
VGPU = "gpupool.io/vgpu"
ANN_MODEL = "gpupool.io/gpu-model"
ANN_PREFER_MODEL = "gpupool.io/prefer-gpu-model"
ANN_AVOID_MODEL = "gpupool.io/avoid-gpu-model"
ANN_EXCLUSIVE = "gpupool.io/exclusive"
ANN_COMPUTE_MODE = "gpupool.io/compute-mode"
ANN_POLICY = "gpupool.io/placement-policy"
ANN_ALLOCATION = "gpupool.io/allocation"
ANN_LEASE = "gpupool.io/lease"
LABEL_TENANT = "gpupool.io/tenant"
LABEL_NODE = "gpupool.io/node"
# Node labels the dev cluster's fake nodes carry (and a GPU node without a GpuNode may carry).
LABEL_GPU_MODEL = "gpupool.io/gpu-model"
LABEL_GPU_COUNT = "gpupool.io/gpu-count"
LABEL_GPU_MEMORY = "gpupool.io/gpu-memory-bytes"
