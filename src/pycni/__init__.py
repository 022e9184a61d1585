"""pycni: the Container Network Interface in Python.

The public API lives in :mod:`pycni.runtime` (the libcni equivalent) and
:mod:`pycni.skel` (the skel equivalent); this module re-exports the names most
callers need.
"""

from pycni.spec.errors import CNIError

__all__ = ["CNIError", "__version__"]
__version__ = "0.1.0"
