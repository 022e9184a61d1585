"""The implementations of the Kernel Protocol: ``native`` (raw rtnetlink with ``struct``:
``wire`` frames requests, ``codec`` encodes and decodes them) and ``pyroute2_adapter``.

Measured (docs/benchmarks.md): pyroute2 0.9 runs an asyncio loop for every synchronous call,
a bridge ADD makes dozens of them, and importing it was most of an in-process plugin run.
Open one through pycni.net.netlink.client.rtnl().
"""
