"""``Etcd.scan_prefix``, the paged listing (issue 32 item 5), against a fake range API:
pages at one revision, resumed after the last key's raw bytes (non-UTF-8 included), a
page shrunk when its answer is over the cap, only the kept keys held."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from pycni.cluster.etcd import Etcd, EtcdResponseTooLarge
from pycni.cluster.lease import LeaseStore

PREFIX = "/p/subnets/"


class FakeRange(Etcd):
    """The kv/range of an etcd holding ``keys``; an answer of more than ``cap`` key
    bytes is too large, as the 8 MiB cap would make it."""

    def __init__(self, keys: list[bytes], cap: int) -> None:
        super().__init__("http://127.0.0.1:1")
        self.keys, self.cap = sorted(keys), cap
        self.requests: list[dict[str, Any]] = []

    def call(self, path: str, body: dict[str, Any], *, limit: int = 0) -> dict[str, Any]:
        assert path == "kv/range" and body.get("keys_only") is True
        self.requests.append(body)
        start = base64.b64decode(body["key"])
        end = base64.b64decode(body["range_end"])
        found = [k for k in self.keys if start <= k < end]
        page = found[: int(body["limit"])]
        if sum(len(k) for k in page) > self.cap:
            raise EtcdResponseTooLarge("too large")
        kvs = [{"key": base64.b64encode(k).decode(), "mod_revision": "5"} for k in page]
        return {"header": {"revision": "42"}, "kvs": kvs, "more": len(found) > len(page)}


def test_pages_resume_after_raw_bytes_and_shrink_for_long_names() -> None:
    subnets = [f"{PREFIX}10.244.{i}.0-24".encode() for i in range(1, 6)]
    junk = [f"{PREFIX}{i:05d}-".encode() + b"x" * 900 for i in range(3000)]
    odd = [PREFIX.encode() + b"\xff\xfe-not-utf8-" + bytes([i]) for i in range(10)]
    etcd = FakeRange([*subnets, *junk, *odd], cap=600_000)
    store = LeaseStore(etcd, "/p")
    kept, revision, seen = etcd.scan_prefix(store.subnets_prefix, store.names_subnet)
    assert [kv.key.encode() for kv in kept] == sorted(subnets)
    assert revision == 42 and seen == len(subnets) + len(junk) + len(odd)
    revisions = [r.get("revision") for r in etcd.requests]
    first = revisions.index("42")  # once a page was read, every page is of its revision
    assert set(revisions[:first]) == {None} and set(revisions[first:]) == {"42"}
    assert any(int(r["limit"]) < 1000 for r in etcd.requests)  # shrunk for the long names


def test_a_single_key_over_the_cap_is_an_error() -> None:
    etcd = FakeRange([PREFIX.encode() + b"x" * 100], cap=10)
    with pytest.raises(EtcdResponseTooLarge):
        etcd.scan_prefix(PREFIX, lambda _key: True)
