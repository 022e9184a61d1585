"""The netlink transport: rtnetlink and nfnetlink sockets, their codecs, the Kernel Protocol."""
