"""The web view (`gpupool web`): the terminal views' model over HTTP, live, per person's RBAC."""
