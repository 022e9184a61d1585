"""The node image's commands (`pycni-image install-cni | uninstall | daemon | agent`).

docs/kubernetes.md: the DaemonSet in deploy/kubernetes/pycni.yaml runs them; install-cni
lays the image's self-contained runtime and entry points onto the host, the daemon enters
the host's mount namespace to serve those entry points, the agent is `pycni agent`.
"""
