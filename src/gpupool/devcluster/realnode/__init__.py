"""One real node beside the kwok nodes (`gpupool dev-cluster up --real-node`).

A kubelet built from the Kubernetes module, on containerd and runc from the host's packages
(`tools/realnode/setup.sh` installs them), with CNI's bridge plugin, joins the dev cluster as
`system:node:<name>`. Its pods run in real containers. The fake GPUs come from gpupool's agent
(a host process here), whose device plugin registers with this kubelet; a runc wrapper
(`fake_toolkit.py`) plays NVIDIA's container toolkit and mounts the project's fake CUDA driver
and NVML library into containers that ask for GPUs.

- `layout.py`: where everything lives (under the dev cluster's folder, and the few fixed host
  folders a kubelet always uses) and the names of what it creates on the host;
- `configs.py`: the containerd, CNI and kubelet configuration files (pure renders);
- `host.py`: what the host must have, checked before anything starts;
- `node.py`: start it (network link, containerd, images, kubelet, agent);
- `teardown.py`: undo it all: containers, processes, mounts, links, iptables, cgroups, sysctls;
- `snapshot.py`: what of the host a real node could leave behind, to compare before and after.
"""
