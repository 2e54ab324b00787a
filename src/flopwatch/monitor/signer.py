"""Who signs the ledger: the :class:`Signer` protocol and the key-file signer the daemon uses today.

The ledger only ever calls ``sign(bytes) -> bytes`` and reads ``key_id`` and ``public_key``, so a key that
never leaves a TPM, a TEE or a confidential-computing VM can replace the key file without touching the
ledger (docs/threat-model.md, "Key custody", says what each would and would not add).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from flopwatch.monitor.keys import key_fingerprint


@runtime_checkable
class Signer(Protocol):
    """An Ed25519 signer: rows and tree heads are signed through it, never with a raw key."""

    @property
    def key_id(self) -> str:
        """SHA-256 (hex) of the raw 32-byte public key (RFC 9162 identifies a log's key by its hash)."""
        ...

    @property
    def public_key(self) -> Ed25519PublicKey: ...

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``data``."""
        ...


class KeySigner:
    """A :class:`Signer` over an in-process private key (the ``LEDGER.db.key`` file, mode 0600)."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self._public = key.public_key()
        self._key_id = key_fingerprint(self._public)

    @property
    def key_id(self) -> str:
        return self._key_id

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self._public

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)
