"""CNI results for every spec version and the conversions between them.

CONTRACT (being implemented; keep these names and signatures):

- ``Interface(name, mac="", mtu=0, sandbox="", socket_path="", pci_id="")``
- ``IPConfig(address: IPv4Interface | IPv6Interface, gateway: IPv4Address | IPv6Address | None = None,
  interface: int | None = None)``
- ``Route(dst: IPv4Network | IPv6Network, gw=None, mtu=0, advmss=0, priority=0, table: int | None = None,
  scope: int | None = None)``
- ``DNS(nameservers=[], domain="", search=[], options=[])`` with ``is_empty()``
- ``Result(cni_version=CURRENT, interfaces=[], ips=[], routes=[], dns=DNS())``:
  ``Result.from_dict(data, default_version=None)`` reads any version (0.1.0 … 1.1.0),
  ``result.to_dict(version=None)`` writes it in ``version`` (default: its own) applying libcni's
  conversion rules, ``result.to_json(version=None)`` is Go's ``Print()`` (4-space indent).
- ``convert(data: dict, to_version: str) -> dict``: libcni's ``Convert`` on raw JSON objects.
Conversion failures raise ``CNIError`` (code 0 / unknown) with libcni's message texts.
"""
