"""The pure parts of nf_tables netlink (net/netfilter/nft_records.py): key encoding and the
comment TLV."""

from __future__ import annotations

import ipaddress

from pycni.net.netfilter import nft_records


def test_concat_key_pads_each_field_to_four_bytes() -> None:
    assert nft_records.concat_key(["tcp", "8080"]) == bytes([6, 0, 0, 0, 0x1F, 0x90, 0, 0])
    assert nft_records.concat_key(["10.0.0.1", "udp", "53"]) == (
        bytes([10, 0, 0, 1]) + bytes([17, 0, 0, 0]) + bytes([0, 53, 0, 0])
    )
    six = nft_records.concat_key(["fd00::1", "sctp", "9"])
    assert six[:16] == ipaddress.ip_address("fd00::1").packed and len(six) == 24


def test_comment_of_reads_the_comment_tlv_among_others() -> None:
    text = b"hello\0"
    data = bytes([3, 2, 9, 9]) + bytes([0, len(text)]) + text
    assert nft_records.comment_of(data) == "hello"
    assert nft_records.comment_of(b"") == ""
    assert nft_records.comment_of(bytes([0, 40]) + b"short") == "short"  # a truncated TLV is cut
