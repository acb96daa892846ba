"""The utilisation-driven autoscaler of Deployments and StatefulSets (docs/autoscaling.md)."""
