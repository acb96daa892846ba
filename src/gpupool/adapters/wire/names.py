"""Every name gpupool reads or writes on Kubernetes objects (DESIGN.md section 3): the API group,
pod resources, annotations, labels and the scheduling gate. The one place these strings are
spelled; every other module imports them from here."""

from __future__ import annotations

GROUP = "gpupool.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"  # paths: f"/apis/{API_VERSION}/gpuleases"
# The terminal views' JSON (adapters.views_json, the web server): its own group and version
VIEWS_API_VERSION = f"views.{GROUP}/v1"
# The webhook configurations' webhooks (adapters.webhook.register)
WEBHOOK_PODS = f"gpu-pods-need-the-gpupool-webhook.{GROUP}"
WEBHOOK_QUOTAS = f"gpuquotas.validate.{GROUP}"

# Pod resources (limits; requests equal limits)
RES_GPU_MEMORY = "gpupool.io/gpu-memory"
RES_GPU_COMPUTE = "gpupool.io/gpu-compute"
RES_GPU = "gpupool.io/gpu"
RES_VGPU = "gpupool.io/vgpu"  # the device-plugin resource; only the webhook writes it
USER_RESOURCES = (RES_GPU_MEMORY, RES_GPU_COMPUTE, RES_GPU)

# Pod annotations a user may set
ANN_GPU_MODEL = "gpupool.io/gpu-model"
ANN_PREFER_GPU_MODEL = "gpupool.io/prefer-gpu-model"
ANN_AVOID_GPU_MODEL = "gpupool.io/avoid-gpu-model"
ANN_EXCLUSIVE = "gpupool.io/exclusive"
ANN_COMPUTE_MODE = "gpupool.io/compute-mode"
ANN_WORKLOAD = "gpupool.io/workload"  # the pod's class for compute-mode defaults
ANN_PLACEMENT_POLICY = "gpupool.io/placement-policy"
ANN_LEASE_TTL = "gpupool.io/lease-ttl"  # the lease's time to live: a duration such as 2h or 90m
# Renewal: any new value (an RFC 3339 time, a counter) renews the lease for its TTL; only the
# pod's tenant (its developers group, the namespace's ServiceAccounts) and gpupool write it
ANN_RENEW = "gpupool.io/renew"
USER_ANNOTATIONS = (
    ANN_GPU_MODEL,
    ANN_PREFER_GPU_MODEL,
    ANN_AVOID_GPU_MODEL,
    ANN_EXCLUSIVE,
    ANN_COMPUTE_MODE,
    ANN_WORKLOAD,
    ANN_PLACEMENT_POLICY,
)
# A gang: pods admitted, placed and reclaimed all together (docs/gangs.md). The gang's name is a
# label (so its members are listed by selector, as Kueue's pod groups), its size an annotation;
# both are set at create and cannot change (the pod-integrity policy)
LABEL_GANG = "gpupool.io/gang"
ANN_GANG_SIZE = "gpupool.io/gang-size"
# "false" on a pod or its namespace (a label there) leaves a pod asking only for nvidia.com/gpu
# to NVIDIA's device plugin (adapters.webhook.hami)
ANN_ADOPT_NVIDIA_GPU = "gpupool.io/adopt-nvidia-gpu"
# The lease's terms: apart from the request's names (a HAMi pod may carry them too)
LEASE_ANNOTATIONS = (ANN_LEASE_TTL, ANN_RENEW)
COMPUTE_MODES = ("mps", "none", "timeslice")  # timeslice: read, then refused at admission
WORKLOAD_CLASSES = ("inference", "training")

# Pod annotations the system writes
# the webhook, at create: JSON {review, lines}, the HAMi or NVIDIA names it translated
ANN_TRANSLATED = "gpupool.io/translated"
ANN_ALLOCATION = "gpupool.io/allocation"  # the extender, at bind
ANN_LEASE = "gpupool.io/lease"  # the extender, at bind
ANN_QUEUED_AT = "gpupool.io/queued-at"  # the webhook: submit time, RFC 3339 with microseconds
ANN_QUEUE = "gpupool.io/queue"  # the controller: "position 2 of 5: <reason>" while gated
ANN_ADMITTED = "gpupool.io/admitted"  # the controller: JSON {at, borrowed, preemptible, reason}
ANN_RECLAIM_NOTICE = "gpupool.io/reclaim-notice"  # the controller: JSON {at, evictAt, claimant}
ANN_REQUEUE = "gpupool.io/requeue"  # the extender: touched so kube-scheduler retries the pod
# the controller, when the pod's lease expired: JSON {at, evictAt} as the reclaim notice
ANN_EXPIRY_NOTICE = "gpupool.io/expiry-notice"
# the controller, when the tenant's budget ran out under `onExhaustion: drain`: the same JSON
ANN_DRAIN_NOTICE = "gpupool.io/drain-notice"
# the controller, when defragmentation moves the pod: JSON {at, evictAt, claimant (the GpuPool),
# for (the pod the room is held for, or ""), room (the node)} as the reclaim notice
ANN_DEFRAG_NOTICE = "gpupool.io/defrag-notice"
# the webhook, at create: JSON, what the pod's claim on gpu.gpupool.io asks (wire.claim_request)
ANN_CLAIM = "gpupool.io/claim"
SYSTEM_ANNOTATIONS = (
    ANN_ALLOCATION,
    ANN_LEASE,
    ANN_QUEUED_AT,
    ANN_QUEUE,
    ANN_ADMITTED,
    ANN_RECLAIM_NOTICE,
    ANN_REQUEUE,
    ANN_EXPIRY_NOTICE,
    ANN_DRAIN_NOTICE,
    ANN_DEFRAG_NOTICE,
    ANN_CLAIM,
)

# GpuNode annotation the controller writes: the cards a defragmentation round is clearing, which
# take no new slices (JSON {"pool", "since", "until", "gpus": [index, ...]}; wire.defrag_mark)
ANN_DEFRAG_MARK = "gpupool.io/defrag"

# On the extender's coordination.k8s.io Lease: the leader's URL, where standbys forward binds
ANN_LEADER_URL = "gpupool.io/leader-url"
# On a dev cluster's GpuNode: "paused" stops its fake heartbeat (devcluster.heartbeat)
ANN_FAKE_HEARTBEAT = "gpupool.io/fake-heartbeat"

LABEL_TENANT = "gpupool.io/tenant"  # on namespaces (set by people) and pods (by the webhook)
LABEL_NODE = "gpupool.io/node"  # on GpuLeases: the node the lease holds capacity on
DEFAULT_TENANT = "default"
QUOTA_GATE = "gpupool.io/quota"  # the scheduling gate the admission queue removes

# Node labels the dev cluster's fake nodes carry (and a GPU node without a GpuNode may carry)
LABEL_GPU_MODEL = "gpupool.io/gpu-model"
LABEL_GPU_COUNT = "gpupool.io/gpu-count"
LABEL_GPU_MEMORY = "gpupool.io/gpu-memory-bytes"

# The autoscaler (docs/autoscaling.md): annotations people set on a Deployment or StatefulSet
ANN_AUTOSCALE = "gpupool.io/autoscale"  # "true" to autoscale it on its pods' GPU utilisation
ANN_AUTOSCALE_MIN = "gpupool.io/autoscale-min-replicas"  # default 1
ANN_AUTOSCALE_MAX = "gpupool.io/autoscale-max-replicas"  # required
ANN_AUTOSCALE_UP = "gpupool.io/autoscale-up-percent"  # scale up above it (default 80)
ANN_AUTOSCALE_DOWN = "gpupool.io/autoscale-down-percent"  # scale down below it (default 30)
ANN_AUTOSCALE_COOLDOWN = "gpupool.io/autoscale-cooldown"  # a duration such as 5m (default)
AUTOSCALE_ANNOTATIONS = (
    ANN_AUTOSCALE,
    ANN_AUTOSCALE_MIN,
    ANN_AUTOSCALE_MAX,
    ANN_AUTOSCALE_UP,
    ANN_AUTOSCALE_DOWN,
    ANN_AUTOSCALE_COOLDOWN,
)
# ... and the one the controller writes there: JSON {last: {at, from, to}, reported}
ANN_AUTOSCALE_STATUS = "gpupool.io/autoscale-status"

# The DRA driver (docs/dra.md): the driver name on its ResourceSlices, its DeviceClass's name, the
# name its kubelet plugin registers with and its CDI vendor; its CDI devices' kind (vendor/class)
DRA_DRIVER = f"gpu.{GROUP}"
DRA_CDI_KIND = f"{DRA_DRIVER}/claim"

# Another path handing out a node's cards (domain.gpu_paths, docs/dra.md "One node, which path"):
# the GpuNode condition the agent writes (status True: placement refuses the node), its reasons,
# and the Event it records on the Node when the finding changes
COND_OTHER_GPU_PATH = "OtherGpuPath"
REASON_OTHER_DEVICE_PLUGIN = "OtherDevicePlugin"
REASON_OTHER_DRA_DRIVER = "OtherDraDriver"
REASON_OTHER_GPU_PATHS = "OtherDevicePluginAndDraDriver"
REASON_ONLY_GPUPOOL = "OnlyGpupool"
EVENT_OTHER_GPU_PATH = "OtherGpuPath"
EVENT_OTHER_GPU_PATH_GONE = "OtherGpuPathGone"
# Extended resources whose names mark NVIDIA's (or HAMi's) device plugin on a Node: nvidia.com/gpu,
# nvidia.com/gpu.shared, nvidia.com/mig-*, HAMi's nvidia.com/gpumem and gpucores
NVIDIA_RESOURCE_PREFIX = "nvidia.com/"
