"""Signed sites: ed25519 signatures over a layout's indexes, and the keys a user trusts.

A signature covers the exact bytes of one index (``tensorplug-hub.json`` or a library's
``builds.json``), and an index records the sha256 of every build file, so a signed index
vouches for every build it lists. It is stored beside the index as ``<index>.sig``::

    {"format": "tensorplug-hub-signature/1", "key": "ed25519:<base64 public key>",
     "signature": "<base64 signature of the index bytes>"}

With trusted keys configured (``trusted_keys=`` or ``$TENSORPLUG_HUB_TRUSTED_KEYS``), an
index without a signature, or signed by a key not trusted, or whose signature does not
verify, is refused before anything it lists is fetched or loaded. Keys are written
``ed25519:<base64 of the 32 raw bytes>``; a private key is a PKCS#8 PEM file (mode 0600).
The ``cryptography`` package (extra ``tensorplug[hub]``) is imported only to sign or check.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from pathlib import Path

from .._verified import IntegrityError

SIGNATURE_FORMAT = "tensorplug-hub-signature/1"
SIGNATURE_SUFFIX = ".sig"
KEYS_ENV = "TENSORPLUG_HUB_TRUSTED_KEYS"
_KEY = re.compile(r"ed25519:[A-Za-z0-9+/]{43}=")


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise ImportError("hub: signing and checking signatures need the 'cryptography' package: "
                          "pip install 'tensorplug[hub]'") from None
    return serialization, ed25519


def _key_text(public_key) -> str:
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + base64.b64encode(raw).decode()


def generate_key(path) -> str:
    """Write a new ed25519 private key to ``path`` (PEM, mode 0600; an existing file is
    never overwritten: FileExistsError) and its public key to ``path.pub``; returns the
    public key, ``ed25519:...``, the text users put in their trusted keys."""
    serialization, ed25519 = _crypto()
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public = _key_text(key.public_key())
    Path(f"{os.fspath(path)}.pub").write_text(public + "\n")
    return public


def private_key(path):
    """The ed25519 private key in the PEM file ``path``; ValueError for anything else."""
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (ValueError, TypeError) as exc:  # TypeError: an encrypted key
        raise ValueError(f"hub: {path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError(f"hub: {path} holds a {type(key).__name__}, expected an ed25519 private key")
    return key


def sign(data: bytes, key) -> bytes:
    """The signature document of ``data`` (an index's bytes) by ``key`` (:func:`private_key`)."""
    document = {"format": SIGNATURE_FORMAT, "key": _key_text(key.public_key()),
                "signature": base64.b64encode(key.sign(data)).decode()}
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


def parse_key(text: str, where: str) -> str:
    """A public key ``ed25519:<base64>``, or the key a ``.pub`` file holds."""
    text = text.strip()
    if _KEY.fullmatch(text):
        return text
    if os.path.isfile(text):
        return parse_key(Path(text).read_text(), f"{where} ({text})")
    raise ValueError(f"{where}: expected a public key 'ed25519:<base64>' or the path of a .pub file, got {text!r}")


def trusted_keys(keys=None) -> tuple[str, ...]:
    """The keys to check signatures against: ``keys`` (a key, a path, or a list of them),
    else ``$TENSORPLUG_HUB_TRUSTED_KEYS`` (separated by commas or white space); empty when
    neither is set (signatures are then not required)."""
    if keys is None:
        text = os.environ.get(KEYS_ENV, "")
        return tuple(parse_key(k, KEYS_ENV) for k in re.split(r"[\s,]+", text) if k)
    items = [keys] if isinstance(keys, (str, os.PathLike)) else list(keys)
    return tuple(parse_key(os.fspath(k), "hub argument 'trusted_keys'") for k in items)


def check(data: bytes, signature: bytes | None, keys: tuple[str, ...], where: str) -> None:
    """IntegrityError unless ``signature`` (the bytes of ``<index>.sig``, None when absent)
    is a valid signature of ``data`` by one of ``keys``. Nothing is checked without keys."""
    if not keys:
        return
    refused = "refused before anything it lists is fetched"
    if signature is None:
        raise IntegrityError(f"hub: {where} is not signed ({where}{SIGNATURE_SUFFIX} is missing), and trusted keys "
                             f"are configured: {refused}")
    try:
        document = json.loads(signature)
        key, value = document["key"], base64.b64decode(document["signature"], validate=True)
        if document.get("format") != SIGNATURE_FORMAT or not isinstance(key, str):
            raise ValueError("not a signature document")
    except (ValueError, KeyError, TypeError, binascii.Error, RecursionError) as exc:
        raise IntegrityError(f"hub: {where}{SIGNATURE_SUFFIX} is not a {SIGNATURE_FORMAT} document ({exc}): "
                             f"{refused}") from None
    if key not in keys:
        raise IntegrityError(f"hub: {where} is signed by {key}, which is not a trusted key: {refused}")
    _, ed25519 = _crypto()
    from cryptography.exceptions import InvalidSignature

    public = ed25519.Ed25519PublicKey.from_public_bytes(base64.b64decode(key[len("ed25519:"):]))
    try:
        public.verify(value, data)
    except InvalidSignature:
        raise IntegrityError(f"hub: the signature of {where} by {key} does not verify (the index was changed after "
                             f"it was signed, or the signature belongs to another index): {refused}") from None
