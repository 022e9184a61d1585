"""The netlink transport: rtnetlink and nfnetlink sockets, their codecs, the Kernel Protocol."""

__all__: list[str] = []
