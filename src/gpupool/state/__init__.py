"""The one model of the cluster that the extender, the controllers and the simulator share, pure:
typed values decoded at the edge (`lease`: GpuLease records on the core's lifecycle; `nodes`:
Node and GpuNode values; `pods`: pod views and node constraints; `admitted`, `notice`: what the
controller records on a pod), the cluster state they feed (`cluster.ClusterCache`: the placement
snapshot with every lease assumed), the extender's per-node lease ledger (`node_ledger`), and the
reclaim-for-room what-if the replay and the live controller both run (`room_reclaim`)."""
