"""The test clusters' certificate authority: a CA of their own, and the certificates it issues.

The control plane (``controlplane.py``) makes one at start and writes it beside its other files
(``ca.crt``, ``ca.key``); the one-node cluster (``tests/cluster``) and the local operator's
stand-in kubelet load it from there to issue their own client and serving certificates.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any


def new_key() -> Any:
    """A new 2048-bit RSA private key."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_key(key: Any) -> bytes:
    """A private key as unencrypted PEM (PKCS#1)."""
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def pem_cert(cert: Any) -> bytes:
    """A certificate as PEM."""
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


class CertificateAuthority:
    """A certificate authority of the test cluster's own.

    Attributes:
        key: Its private key.
        cert: Its self-signed certificate.

    """

    def __init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import NameOID

        self.key = new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tfrs-test-ca")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        """The CA whose certificate and key :func:`start` wrote (``ca.crt``, ``ca.key``)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        ca = cls.__new__(cls)
        ca.cert = x509.load_pem_x509_certificate(cert_pem)
        ca.key = serialization.load_pem_private_key(key_pem, password=None)
        return ca

    @classmethod
    def read(cls, cert_file: Path, key_file: Path) -> CertificateAuthority:
        """:meth:`load` from the two files (the control plane's ``ca.crt`` and ``ca.key``)."""
        return cls.load(cert_file.read_bytes(), key_file.read_bytes())

    def issue(
        self,
        common_name: str,
        organizations: tuple[str, ...] = (),
        hosts: tuple[str, ...] = (),
        server: bool = False,
    ) -> tuple[bytes, bytes]:
        """``(certificate PEM, key PEM)`` for a client (or, with ``server``, a serving) cert."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = new_key()
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return pem_cert(cert), pem_key(key)


def write_pair(folder: Path, name: str, pair: tuple[bytes, bytes]) -> tuple[Path, Path]:
    """Write ``(certificate PEM, key PEM)`` as ``NAME.crt`` and ``NAME.key`` (readable by the
    owner only) in ``folder``; return the two paths."""
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    cert.write_bytes(pair[0])
    key.write_bytes(pair[1])
    key.chmod(0o600)
    return cert, key
