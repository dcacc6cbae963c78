"""BLAKE2b for the group keys and statement fingerprints, without loading OpenSSL.

`hashlib.blake2b` *is* `_blake2.blake2b`: CPython's Lib/hashlib.py never takes blake2 from
OpenSSL (`__block_openssl_constructor`), so the digests are the same. But importing hashlib loads
OpenSSL's libcrypto through `_hashlib`, ~3.4 MB of resident memory in the parse worker, which
needs no other hash (the daemon loads it anyway, for TLS and HMAC).
"""

try:
    from _blake2 import blake2b
except ImportError:  # an interpreter built without it: hashlib's, whatever it is built on
    from hashlib import blake2b

__all__ = ["blake2b"]
