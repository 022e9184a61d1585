"""`pycni doctor`: can this node run pycni? One isolated check per concern, each saying ok,
warn or fail and what to do.

``report`` holds the check results and the runner that keeps one broken check from stopping
the others; ``kernel`` tries each kernel feature in a scratch namespace; ``node`` looks at
what a runtime on this node would use (plugin and conf dirs, conflists, the daemon) and at
leftovers (``pycni.inspect.leaks``).
"""
