"""What the tests share: waiting on a condition with a hang guard (`waiting`), Kubernetes object
builders (`builders`), the coordination Lease as the leader tests read it (`coordination`) and a
fake kubelet of our own (`kubelet`). Importable as `support` (pytest's pythonpath puts tests/ on
the path, see pyproject.toml); checked by mypy --strict with src/.
"""
