"""`pycni demo`: a throwaway node with three pods networked by pycni's real chain.

``run.up`` builds it (namespaces, plugins installed into a temp dir, ADD through
``pycni.runtime.CNIConfig``), ``checks`` proves it works, ``topology`` shows it, and
``run.down`` removes it all, also later from the state file of a ``--keep`` run.
"""
