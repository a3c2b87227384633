"""Certificates for TLS tests, made on the spot with `cryptography`: a CA, the
daemon's certificate for 127.0.0.1, and client certificates naming tenants."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Issued:
    cert_file: str
    key_file: str


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CA:
    """A certificate authority writing what it issues below `directory`."""

    def __init__(self, directory: Path, name: str = "toolrt test CA") -> None:
        self.directory = directory
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.key = ec.generate_private_key(ec.SECP256R1())
        cert = self._build(self.name, self.key, ca=True, sans=[])
        self.cert_file = str(directory / f"{name.replace(' ', '-')}.pem")
        Path(self.cert_file).write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def _build(
        self, subject: x509.Name, key: ec.EllipticCurvePrivateKey, ca: bool, sans: list
    ) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(self.key, hashes.SHA256())

    def issue(self, stem: str, common_name: str, sans: list) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        cert = self._build(subject, key, ca=False, sans=sans)
        cert_file, key_file = self.directory / f"{stem}.pem", self.directory / f"{stem}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_key_pem(key))
        return Issued(str(cert_file), str(key_file))

    def server(self) -> Issued:
        """The daemon's certificate, valid for 127.0.0.1 and localhost."""
        sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        return self.issue("server", "toolrt daemon", sans)

    def client(self, stem: str, common_name: str = "client", tenant_uri: str = "") -> Issued:
        sans = [x509.UniformResourceIdentifier(tenant_uri)] if tenant_uri else []
        return self.issue(stem, common_name, sans)
