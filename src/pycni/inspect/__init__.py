"""`pycni inspect`: what CNI has done on this node, read from the kernel and the on-disk state.

``collect.collect(paths)`` builds a :class:`~pycni.inspect.model.NodeState`;
``leaks.find_leaks(state)`` says what looks left behind; ``render_text``, ``render_svg`` and
``model.to_json`` present it; ``cleanup.clean(...)`` removes the leaks.
"""
