"""What the main plugins share, one job per module.

conf (the config keys macvlan, tap and host-device read alike), pod_iface (IPAM around the
one pod interface), pod_link (the pod link's DEL), masquerade (bridge's and ptp's ipMasq step),
sublink (macvlan's, ipvlan's and vlan's link made from a master).
"""
