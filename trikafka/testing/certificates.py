"""Test certificates for TLS (docs/protocol.md §18.1): one CA, the broker's certificate, clients' certificates.

Made with ``trustme`` (a test dependency: ``pip install trustme``); every PEM
is written into one directory so that broker settings, ``trikafka serve``
flags and the clients' own options (file paths) can name them.  The one place
trikafka's tests, and ``running_tls_kafka_broker``, get certificates from.
"""

from __future__ import annotations

import datetime
import os
import ssl
from dataclasses import dataclass

import trustme

LOOPBACK_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class ClientCertificate:
    """A client's certificate and key files, and the principal the broker gives it (§18.1)."""

    cert_path: str
    key_path: str
    principal: str


@dataclass(frozen=True)
class CertificateFiles:
    """PEM files of one test CA, a broker certificate it signed, and a second, untrusted CA."""

    directory: str
    ca_path: str  # the CA that signed the broker's and the clients' certificates
    broker_cert_path: str  # for 127.0.0.1 and localhost, chain included
    broker_key_path: str
    untrusted_ca_path: str  # a CA that signed nothing here: a client trusting only it rejects the broker
    _ca: trustme.CA
    _untrusted: trustme.CA

    def broker_settings(self, *, mutual: bool = False) -> dict[str, str]:
        """``BrokerConfig`` fields for TLS with these files (``mutual``: client certificates required)."""
        settings = {"ssl_certificate_location": self.broker_cert_path, "ssl_key_location": self.broker_key_path,
                    "ssl_ca_location": self.ca_path}
        if mutual:
            settings["ssl_client_ca_location"] = self.ca_path
        return settings

    def client(self, name: str, *, expired: bool = False, untrusted: bool = False) -> ClientCertificate:
        """A client certificate with subject ``CN=name,OU=clients,O=trikafka tests`` (``expired``: valid only in
        the past; ``untrusted``: signed by the CA nobody trusts)."""
        ca = self._untrusted if untrusted else self._ca
        not_before = not_after = None
        if expired:
            now = datetime.datetime.now(datetime.timezone.utc)
            not_before, not_after = now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)
        leaf = ca.issue_cert(f"{name}.clients.test", common_name=name, organization_name="trikafka tests",
                             organization_unit_name="clients", not_before=not_before, not_after=not_after)
        tag = f"{name}{'-expired' if expired else ''}{'-untrusted' if untrusted else ''}"
        cert_path = os.path.join(self.directory, f"client-{tag}.pem")
        key_path = os.path.join(self.directory, f"client-{tag}.key")
        leaf.cert_chain_pems[0].write_to_path(cert_path)
        leaf.private_key_pem.write_to_path(key_path)
        return ClientCertificate(cert_path, key_path, f"User:CN={name},OU=clients,O=trikafka tests")

    def client_context(self, client: ClientCertificate | None = None, *, ca_path: str | None = None) -> ssl.SSLContext:
        """An ``ssl.SSLContext`` trusting the test CA (or ``ca_path``), with ``client``'s certificate."""
        context = ssl.create_default_context(cafile=ca_path or self.ca_path)
        if client is not None:
            context.load_cert_chain(client.cert_path, client.key_path)
        return context


def make_certificates(directory: str) -> CertificateFiles:
    """Write a test CA, a broker certificate for loopback and an untrusted CA into ``directory``."""
    ca, untrusted = trustme.CA(organization_name="trikafka test CA"), trustme.CA(organization_name="nobody")
    broker = ca.issue_cert(*LOOPBACK_NAMES, common_name="broker", organization_name="trikafka tests")
    paths = {name: os.path.join(directory, name) for name in ("ca.pem", "broker.pem", "broker.key", "untrusted.pem")}
    ca.cert_pem.write_to_path(paths["ca.pem"])
    untrusted.cert_pem.write_to_path(paths["untrusted.pem"])
    with open(paths["broker.pem"], "wb") as f:
        for pem in broker.cert_chain_pems:
            f.write(pem.bytes())
    broker.private_key_pem.write_to_path(paths["broker.key"])
    return CertificateFiles(directory, paths["ca.pem"], paths["broker.pem"], paths["broker.key"],
                            paths["untrusted.pem"], ca, untrusted)

