"""docs/walk.md's list of the modules a bridge ADD passes through is the code's.

A bridge ADD (isGateway, ipMasq, host-local IPAM) runs through its installed in-process entry
point under a ``sys.setprofile`` hook that notes, from the entry point's ``main`` on, each
pycni module the first time one of its functions runs (class bodies left out); the list between the
``add-walk`` markers of docs/walk.md must name the same modules in the same order.
When the ADD path changes, this fails with the traced list to put in the docs.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from pycni.entrypoints import install
from tests import harness

pytestmark = pytest.mark.kernel

DOC = Path(__file__).resolve().parents[2] / "docs" / "walk.md"

HOOK = r"""
import os, sys
order, seen = [], set()

def hook(frame, event, arg):
    code = frame.f_code
    if event != "call" or not code.co_flags & 1 or code.co_name.startswith("<"):
        return  # only functions (CO_OPTIMIZED): no module or class bodies, no lambdas
    name = frame.f_globals.get("__name__", "")
    if not order and (name, code.co_name) != ("pycni.skel.main", "main"):
        return  # what runs while modules are imported, before the call, is not the walk
    if name.startswith("pycni") and name not in seen:
        seen.add(name)
        order.append(name)

real_exit = os._exit

def finish(code):
    sys.setprofile(None)
    with open(os.environ["WALK_OUT"], "w") as out:
        out.write("\n".join(order))
    real_exit(code)

os._exit = finish
sys.argv = sys.argv[1:]
source = open(sys.argv[0]).read()
sys.setprofile(hook)
exec(compile(source, sys.argv[0], "exec"), {"__name__": "__main__"})
"""


def documented() -> list[str]:
    text = DOC.read_text()
    section = text.split("<!-- add-walk:begin -->", 1)[1].split("<!-- add-walk:end -->", 1)[0]
    return re.findall(r"^\d+\. `(pycni[\w.]*)`", section, re.M)


def test_the_documented_add_walk_is_the_traced_one(
    node: harness.Namespace, pod_factory: Any, tmp_path: Path
) -> None:
    pod = pod_factory()
    bindir = tmp_path / "bin"
    install.install(bindir, form="inprocess", names=["bridge", "host-local"])
    (tmp_path / "hook.py").write_text(HOOK)
    config = {
        "cniVersion": "1.0.0", "name": "walknet", "type": "bridge", "bridge": "walk0",
        "isGateway": True, "ipMasq": True,
        "ipam": {"type": "host-local", "dataDir": str(tmp_path / "ipam"),
                 "ranges": [[{"subnet": "10.90.0.0/24"}]]},
    }  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "walk1", "CNI_NETNS": pod.path,
        "CNI_IFNAME": "eth0", "CNI_PATH": str(bindir), "WALK_OUT": str(tmp_path / "walk.txt"),
    }  # fmt: skip
    stdin = json.dumps(config).encode()
    added = node.run(
        install.interpreter(), "-I", str(tmp_path / "hook.py"), str(bindir / "bridge"),
        input=stdin, env=env,
    )  # fmt: skip
    try:
        assert json.loads(added.stdout)["ips"], added.stdout  # the ADD did its work
        traced = (tmp_path / "walk.txt").read_text().split()
    finally:
        node.run(str(bindir / "bridge"), input=stdin, env={**env, "CNI_COMMAND": "DEL"})
    listed = documented()
    assert len(listed) > 20, "the add-walk list of docs/walk.md is missing"
    assert traced == listed, "docs/walk.md's ADD walk should read:\n" + "\n".join(
        f"{i}. `{name}`" for i, name in enumerate(traced, 1)
    )
