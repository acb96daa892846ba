"""How often a node agent renews its node's heartbeat Lease unless told otherwise; the dev
cluster's fake agents renew as often, so what a dev cluster costs its readers is what the same
cluster of real agents would.

Every renewal is an event that each reader of the Leases (the controller's watch cache) reads:
at 5,000 nodes a 10 s period is 500 events a second, about 1.2 CPU s a minute of the controller
for the stream alone; 30 s is a third of that (bench/watch_stream.py, docs/architecture.md).
"""

DEFAULT_HEARTBEAT_S = 30.0  # node health's --suspect-after (90 s) is three periods
