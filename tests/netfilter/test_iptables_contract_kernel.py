"""The iptables and conntrack fakes' contract, real side: ThreadIptables and ThreadConntrack in
a private namespace answer every case of tests/netfilter/iptables_contract.py as recorded
there, and as the fakes do, with the legacy and the nft variant (the process-per-rule cases
with the system's variant, the conntrack cases once).

tests/netfilter/test_iptables_contract.py checks the fakes against the same answers without root.
When an iptables or kernel upgrade changes an answer, this module fails first: fix EXPECTED,
then the fake.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from pycni.net.netfilter.iptables_script import SavedTable
from pycni.net.netfilter.iptables_seam import THREAD_CONNTRACK, THREAD_IPTABLES
from tests import harness
from tests.netfilter.iptables_contract import ALL, Entry, Side, expected, on_fake, params

pytestmark = pytest.mark.kernel


class EnteringIptables:
    """The real Iptables, each call from a thread inside the namespace."""

    def __init__(self, ns: harness.Namespace) -> None:
        self.ns = ns

    def available(self, family: int = 4, variant: str | None = None) -> bool:
        with self.ns.entered():
            return THREAD_IPTABLES.available(family, variant)

    def save(self, table: str, family: int = 4, variant: str | None = None) -> SavedTable:
        with self.ns.entered():
            return THREAD_IPTABLES.save(table, family, variant)

    def restore(self, script: str, family: int = 4, variant: str | None = None) -> None:
        with self.ns.entered():
            THREAD_IPTABLES.restore(script, family, variant)

    def command(self, args: Sequence[str], family: int = 4) -> tuple[int, str]:
        with self.ns.entered():
            return THREAD_IPTABLES.command(args, family)

    def nft_chain_exists(self, table: str, chain: str, family: int = 4) -> bool:
        with self.ns.entered():
            return THREAD_IPTABLES.nft_chain_exists(table, chain, family)

    def legacy_nat(self) -> bool:
        with self.ns.entered():
            return THREAD_IPTABLES.legacy_nat()


class EnteringConntrack:
    def __init__(self, ns: harness.Namespace) -> None:
        self.ns = ns

    def delete_by_address(self, address: bytes, protocol: str) -> int:
        with self.ns.entered():
            return THREAD_CONNTRACK.delete_by_address(address, protocol)

    def delete_by_dst_port(self, ports: list[int], protocol: str, family: int) -> int:
        with self.ns.entered():
            return THREAD_CONNTRACK.delete_by_dst_port(ports, protocol, family)


def on_kernel(case: Callable[[Side], Any], ns: harness.Namespace, variant: str) -> Any:
    def seed(e: Entry) -> None:
        proto, src, dst, sport, dport, reply = e
        args = ["-p", proto, "-s", src, "-d", dst, "--sport", str(sport), "--dport", str(dport)]
        if reply:
            args += ["-r", reply, "-q", src, "--reply-port-src", str(dport)]
            args += ["--reply-port-dst", str(sport)]
        state = ["--state", "ESTABLISHED"] if proto == "tcp" else []
        ns.run("conntrack", "-I", *args, *state, "--timeout", "300")

    def entries() -> set[Entry]:
        out: set[Entry] = set()
        for line in ns.run("conntrack", "-L", "-f", "ipv4", check=False).stdout.splitlines() + (
            ns.run("conntrack", "-L", "-f", "ipv6", check=False).stdout.splitlines()
        ):
            words = line.split()
            if not words:
                continue
            kv = [w.split("=", 1) for w in words if "=" in w]
            src, dst, sport, dport, rsrc = (v for k, v in kv[:5])
            reply = "" if rsrc == dst else rsrc
            out.add((words[0], src, dst, int(sport), int(dport), reply))
        return out

    return case(Side(EnteringIptables(ns), EnteringConntrack(ns), variant, seed, entries))


@pytest.mark.parametrize(("name", "variant"), params())
def test_real_transports_answer_as_recorded_and_as_the_fakes(
    name: str, variant: str, pod_factory: Any
) -> None:
    ns = pod_factory()
    real = on_kernel(ALL[name], ns, variant)
    assert real == on_fake(ALL[name], variant)
    assert real == expected(name, variant)
