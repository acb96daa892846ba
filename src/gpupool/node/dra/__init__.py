"""The DRA driver `gpu.gpupool.io`, node side: the ResourceSlice of the node's cards, the
kubelet's DRA plugin (NodePrepareResources / NodeUnprepareResources) and the CDI specs it writes.
docs/dra.md says what runs where and what is not done yet."""
