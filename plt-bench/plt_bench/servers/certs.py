"""A testbed's TLS certificate, whatever server presents it: self-signed ECDSA P-256, made per
testbed for every origin's host name and address. Browsers trust it without a CA: Chromium
through the SHA-256 of its public key (--ignore-certificate-errors-spki-list, for TCP and QUIC
alike), Firefox for the session (browsers.firefox)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
from pathlib import Path

from .. import cmd


@dataclasses.dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path
    spki_sha256_b64: str


def spki_hash_from_pem_pubkey(pem: str) -> str:
    """base64(sha256(DER SubjectPublicKeyInfo)) from a 'PUBLIC KEY' PEM block."""
    body = "".join(line for line in pem.strip().splitlines() if not line.startswith("-----"))
    return base64.b64encode(hashlib.sha256(base64.b64decode(body)).digest()).decode()


def subject_alt_names(origins: list[tuple[str, str]]) -> str:
    """The certificate's subjectAltName: every origin's host name and address (pure)."""
    names = [f"DNS:{h}" for h in dict.fromkeys(h for h, _ in origins)]
    ips = [f"IP:{ip}" for ip in dict.fromkeys(ip for _, ip in origins)]
    return ",".join(names + ips)


def make_certificate(folder: Path, origins: list[tuple[str, str]], days: int = 30) -> Certificate:
    """A self-signed certificate for every origin, (host, address) pairs; the first is its CN."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    host = origins[0][0]
    old = os.umask(0o077)
    try:
        cmd.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", str(key), "-out", str(cert), "-days", str(days),
                 "-subj", f"/CN={host}", "-addext", f"subjectAltName={subject_alt_names(origins)}"])
    finally:
        os.umask(old)
    os.chmod(key, 0o600)
    os.chmod(cert, 0o600)
    pub = cmd.run(["openssl", "x509", "-in", str(cert), "-pubkey", "-noout"]).stdout
    return Certificate(cert, key, spki_hash_from_pem_pubkey(pub))
