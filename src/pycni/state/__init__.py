"""The files a plugin keeps between its calls (reservations, backups, records), as a seam.

``files.StateFiles`` is what a plugin is handed (``req.host.state()``); ``disk`` is the
machine's file system, ``fake_files`` an in-memory one for rootless tests. Held to each
other by tests/state_contract.py.
"""
