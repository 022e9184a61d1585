"""The Kernel Protocol on a real kernel: ``native`` (raw rtnetlink with ``struct``: ``wire``
frames requests; ``codec`` (links, addresses, routes, rules, namespace ids), ``neigh_codec``
(neighbours, FDB entries) and ``tc_codec`` (qdiscs, filters) encode and decode them).

Measured (docs/benchmarks.md): pyroute2 0.9 runs an asyncio loop for every synchronous call,
a bridge ADD makes dozens of them, and importing it was most of an in-process plugin run.
Open one through pycni.net.netlink.client.rtnl().
"""
