"""The Kernel Protocol on a real kernel: ``native`` (raw rtnetlink with ``struct``: ``wire``
frames requests; ``codec`` (links, addresses, routes, rules, namespace ids), ``neigh_codec``
(neighbours, FDB entries) and ``tc_codec`` (qdiscs, filters) encode and decode them).

Measured (see docs/architecture.md): pyroute2 0.9 runs an asyncio loop for every synchronous
call, ~0.25-0.4 ms of CPU per request, and a bridge ADD makes ~35 of them; importing it costs
~180 ms, most of an in-process plugin run. Open one through pycni.net.netlink.client.rtnl().
"""
