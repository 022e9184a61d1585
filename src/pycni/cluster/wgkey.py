"""WireGuard keys: X25519 (RFC 7748) in pure Python, and the node's private key file.

Why pure Python: pycni's dependencies are pip-nftables and prometheus-client;
``cryptography`` or PyNaCl would be a compiled dependency for one scalar multiplication
that runs once per agent start (to derive the public key from the private one; WireGuard
itself does all other crypto in the kernel). The Montgomery ladder below is the RFC's
pseudo-code; it is not constant-time in CPython, which is acceptable here: it runs once,
on the node that owns the key, with no attacker-chosen input or timing oracle. Test
vectors from RFC 7748 and ``wg pubkey``/``openssl`` cross-checks are in the unit tests.

The key file holds the base64 private key (``wg genkey``'s format), mode 0600, owned by
root, written to a temp file and linked into place (never present and empty), opened
without following a symlink or blocking on a FIFO; a node keeps it across
restarts so its peers need not learn a new key (flannel keeps ``/run/flannel/wgkey``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import stat

P = 2**255 - 19
A24 = 121665
KEY_LEN = 32
DEFAULT_KEY_FILE = "/run/flannel/wgkey"


class WgKeyError(ValueError):
    """A key or key file that cannot be used (the message says why)."""


def _clamp(scalar: bytes) -> int:
    k = bytearray(scalar)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    return int.from_bytes(k, "little")


def x25519(scalar: bytes, u_coordinate: bytes) -> bytes:
    """The RFC 7748 X25519 function: ``scalar`` times the point with ``u_coordinate``."""
    if len(scalar) != KEY_LEN or len(u_coordinate) != KEY_LEN:
        raise WgKeyError("X25519 takes 32-byte inputs")
    k = _clamp(scalar)
    u = int.from_bytes(u_coordinate, "little") & ((1 << 255) - 1)
    x1, x2, z2, x3, z3 = u, 1, 0, u, 1
    swap = 0
    for t in reversed(range(255)):
        bit = (k >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = (x2 + z2) % P, (x2 - z2) % P
        aa, bb = a * a % P, b * b % P
        e = (aa - bb) % P
        c, d = (x3 + z3) % P, (x3 - z3) % P
        da, cb = d * a % P, c * b % P
        x3 = (da + cb) ** 2 % P
        z3 = x1 * (da - cb) ** 2 % P
        x2 = aa * bb % P
        z2 = e * (aa + A24 * e) % P
    if swap:
        x2, z2 = x3, z3
    return (x2 * pow(z2, P - 2, P) % P).to_bytes(KEY_LEN, "little")


BASE_POINT = (9).to_bytes(KEY_LEN, "little")


def public_key(private: bytes) -> bytes:
    return x25519(private, BASE_POINT)


def generate() -> bytes:
    """A new private key (clamped, as ``wg genkey`` prints it)."""
    return _clamp(os.urandom(KEY_LEN)).to_bytes(KEY_LEN, "little")


def encode(key: bytes) -> str:
    return base64.b64encode(key).decode()


def decode(text: str) -> bytes:
    """A base64 WireGuard key; WgKeyError unless it is exactly 32 bytes."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise WgKeyError("not base64") from None
    if len(raw) != KEY_LEN:
        raise WgKeyError(f"{len(raw)} bytes, a WireGuard key has {KEY_LEN}")
    return raw


def decode_canonical(text: str) -> bytes:
    """A WireGuard key as a lease must spell it: exactly ``encode`` of its 32 bytes. Base64
    decoding forgives surrounding whitespace and the two unused low bits of the last
    character, so 8 spellings decode to one key; a claim on a key compares bytes, and any
    spelling but the one a node publishes is refused."""
    raw = decode(text)
    if encode(raw) != text:
        raise WgKeyError("not in canonical form (44 characters of standard base64)")
    return raw


def load_or_create(path: str) -> bytes:
    """The private key in ``path``, made (0600, exclusively) when there is none. A file
    that is a symlink, not a regular file, readable by others or not ours is refused."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO: no hang
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return _create(path)
    except OSError as exc:
        raise WgKeyError(f"cannot open the WireGuard key file {path}: {exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise WgKeyError(f"{path} is not a regular file")
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise WgKeyError(
                f"{path} must be owned by uid {os.geteuid()} and readable by it alone "
                f"(mode {stat.S_IMODE(info.st_mode):04o}): it holds the node's private key"
            )
        text = os.read(fd, 256).decode(errors="replace")
    finally:
        os.close(fd)
    if not text:  # a key file someone made and never wrote (an older agent killed early)
        return _create(path, replace=True)
    try:
        return decode(text)
    except WgKeyError as exc:
        raise WgKeyError(f"{path} does not hold a WireGuard private key: {exc}") from None


def _create(path: str, *, replace: bool = False) -> bytes:
    """A new key written to a temp file, then linked into place (``replace``: renamed over
    an empty key file): ``path`` never exists without a key in it, however the agent dies."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    key = generate()
    temp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temp, flags, 0o600)
    except OSError as exc:
        raise WgKeyError(f"cannot create the WireGuard key file {path}: {exc}") from None
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (encode(key) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.rename(temp, path)
        else:
            try:
                os.link(temp, path)
            except FileExistsError:  # another agent made it meanwhile: use that one
                return load_or_create(path)
    except OSError as exc:
        raise WgKeyError(f"cannot create the WireGuard key file {path}: {exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    return key
