"""The demo's topology as text, drawn from what `pycni inspect` reads in the node."""

from __future__ import annotations

from pycni.inspect.model import NodeState


def render(state: NodeState, client: str) -> str:
    lines = [f"node {state.netns}"]
    bridges = {b.name for b in state.bridges}
    for veth in state.veths:
        if veth.master in bridges:
            continue
        addrs = ", ".join(veth.addresses)
        peer = f"{veth.peer.namespace}:{veth.peer.name}" if veth.peer else client
        if veth.peer is not None and veth.peer.addresses:
            peer += " " + ", ".join(veth.peer.addresses)
        lines.append(f"├── {veth.name} {addrs} (uplink)  ══ veth ══  {peer}")
    for b_i, bridge in enumerate(state.bridges):
        last_bridge = b_i == len(state.bridges) - 1
        lines.append(
            f"{'└' if last_bridge else '├'}── bridge {bridge.name} {', '.join(bridge.addresses)}"
        )
        ports = [v for v in state.veths if v.master == bridge.name]
        for p_i, veth in enumerate(ports):
            branch = "└" if p_i == len(ports) - 1 else "├"
            stem = " " if last_bridge else "│"
            if veth.peer is not None:
                pod = f"{veth.peer.namespace}:{veth.peer.name} {', '.join(veth.peer.addresses)}"
            else:
                pod = "(peer not found)"
            lines.append(f"{stem}   {branch}── {veth.name}  ══ veth ══  {pod}")
    for mapping in state.port_mappings:
        lines.append(
            f"port mapping: node {mapping.protocol}/{mapping.host_port} → "
            f"{mapping.target_ip}:{mapping.target_port}"
        )
    return "\n".join(lines) + "\n"
