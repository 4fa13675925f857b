"""Self-signed TLS certificates for tests, made with ``cryptography``."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def make_cert(directory: Path, name: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost with common name ``name``;
    returns (certfile, keyfile)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(name)
    cert = (
        _builder(subject, subject, key)
        .add_extension(_localhost(), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write_pair(directory, name, cert, key)


def common_name(der: bytes) -> str:
    """The common name of a DER certificate (what ``getpeercert(True)`` returns)."""
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def client_context(*certfiles: Path) -> ssl.SSLContext:
    """A client context trusting exactly ``certfiles``."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    for certfile in certfiles:
        ctx.load_verify_locations(certfile)
    return ctx


def make_ca(directory: Path, name: str = "test-ca") -> tuple[Path, Path]:
    """A private certificate authority; returns (certfile, keyfile)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(name)
    cert = (
        _builder(subject, subject, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write_pair(directory, name, cert, key)


def make_cert_signed_by(
    directory: Path, name: str, ca_certfile: Path, ca_keyfile: Path
) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 and localhost issued by the CA."""
    ca_cert = x509.load_pem_x509_certificate(ca_certfile.read_bytes())
    ca_key = serialization.load_pem_private_key(ca_keyfile.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(_name(name), ca_cert.subject, key)
        .add_extension(_localhost(), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _write_pair(directory, name, cert, key)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    """A certificate valid from five minutes ago for a day."""
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
    )


def _localhost() -> x509.SubjectAlternativeName:
    return x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )


def _write_pair(
    directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    certfile = directory / f"{name}.crt"
    keyfile = directory / f"{name}.key"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certfile, keyfile
