"""Cluster networking: a pod subnet per node leased in etcd, host-gw or VXLAN between nodes.

``agent`` runs on each node (``pycni agent``); ``plugins.meta.flannel`` attaches pods to the
node's subnet; ``pycni.playground.cluster`` builds a whole cluster on one machine
(``pycni cluster up``).
"""
