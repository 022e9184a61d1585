"""The child processes a plugin starts and signals (dnsname's dnsmasq), as a seam.

``processes.Processes`` is what a plugin is handed (``req.host.processes()``); ``real`` runs
and signals the machine's processes, ``fake_processes`` records them for rootless tests. Held
to each other by tests/process_contract.py.
"""
