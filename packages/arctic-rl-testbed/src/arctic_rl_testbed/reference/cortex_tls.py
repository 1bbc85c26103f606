"""A self-signed TLS certificate for the Cortex emulator's `--tls` mode, so arctic-platform 0.1.4's
`CortexTransport` can use its `host` path unmodified (`https://{host}`, where it sends the PAT itself):
trust the certificate with `REQUESTS_CA_BUNDLE` (requests) and `SSL_CERT_FILE` (aiohttp, read when
aiohttp is first imported).

The certificate names the loopback addresses and the bound host, is valid for 7 days, and is written
with its private key (mode 0600) into a folder the caller chooses.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TLSFiles:
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def self_signed(folder: Path, host: str = "127.0.0.1") -> TLSFiles:
    """Write `cert.pem` and `key.pem` for `host` (plus localhost, 127.0.0.1, ::1) into `folder`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    addresses = {"127.0.0.1", "::1"}
    try:
        ipaddress.ip_address(host)
        addresses.add(host)
    except ValueError:
        if host not in ("localhost", ""):
            names.append(x509.DNSName(host))
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted(addresses)]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "arctic-rl Cortex emulator")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    files = TLSFiles(folder / "cert.pem", folder / "key.pem")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(files.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return files
