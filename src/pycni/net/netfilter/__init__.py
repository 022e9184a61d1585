"""Netfilter: nftables (libnftables JSON and nfnetlink), iptables, masquerading, conntrack, and
the checks every value passes before it becomes part of a rule."""
