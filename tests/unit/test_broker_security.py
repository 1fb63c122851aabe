"""The security-protocol table, the mutual-TLS principal rule and the TLS settings' errors (docs/protocol.md §18.1)."""

from __future__ import annotations

import pytest

from tests.helpers.certificates import make_certificates
from trikafka.broker.config import BrokerConfig, ConfigError
from trikafka.broker.security import SecurityProtocol, TlsContexts, TlsSettingError, certificate_principal


@pytest.mark.parametrize("text, tls, sasl", [
    ("PLAINTEXT", False, False), ("ssl", True, False), ("SASL_PLAINTEXT", False, True), (" sasl_ssl ", True, True),
])
def test_each_protocol_says_whether_it_speaks_tls_and_sasl(text, tls, sasl):
    protocol = SecurityProtocol.parse(text)
    assert (protocol.tls, protocol.sasl) == (tls, sasl)


def test_an_unknown_protocol_is_a_one_line_error():
    with pytest.raises(ValueError, match=r"unknown security protocol 'TLS' \(one of PLAINTEXT, SSL, SASL_PLAINTEXT"):
        SecurityProtocol.parse("TLS")


def test_the_principal_is_the_subject_in_rfc_2253_order_and_escaping():
    subject = ((("countryName", "NL"),), (("organizationName", "Acme, Inc."),),
               (("organizationalUnitName", "eng"), ("userId", "7")), (("commonName", "#1 <admin> "),),
               (("emailAddress", "a@b.example"),))
    assert certificate_principal({"subject": subject}) == (
        r"User:emailAddress=a@b.example,CN=\#1 \<admin\>\ ,OU=eng+UID=7,O=Acme\, Inc.,C=NL")


def test_tls_on_a_listener_needs_a_certificate_and_a_key():
    with pytest.raises(ConfigError, match="TLS needs ssl.certificate.location"):
        BrokerConfig(kafka_port=0, kafka_security_protocol="SSL")
    with pytest.raises(ConfigError, match="the 0.7 port has no SASL"):
        BrokerConfig(port_security_protocol="SASL_SSL")


def test_bad_files_are_named_in_one_line(tmp_path):
    files = make_certificates(str(tmp_path))
    (tmp_path / "other").mkdir()
    other = make_certificates(str(tmp_path / "other"))
    base = BrokerConfig(kafka_port=0, kafka_security_protocol="SSL", **files.broker_settings())
    cases = {
        "ssl.certificate.location /nowhere.pem: No such file or directory":
            base.replace(ssl_certificate_location="/nowhere.pem"),
        f"ssl.key.location {other.broker_key_path} does not match ssl.certificate.location {files.broker_cert_path}":
            base.replace(ssl_key_location=other.broker_key_path),
        f"ssl.certificate.location {files.broker_key_path}: no PEM certificate in it":
            base.replace(ssl_certificate_location=files.broker_key_path),
        f"ssl.client.ca.location {files.broker_key_path}: no PEM CA certificate in it":
            base.replace(ssl_client_ca_location=files.broker_key_path),
    }
    for message, config in cases.items():
        with pytest.raises(TlsSettingError) as caught:
            TlsContexts.load(config)
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_contexts_accept_tls_1_2_and_up_and_require_client_certificates_only_with_a_client_ca(tmp_path):
    import ssl

    files = make_certificates(str(tmp_path))
    plain = TlsContexts.load(BrokerConfig(kafka_port=0, kafka_security_protocol="SSL", **files.broker_settings()))
    mutual = TlsContexts.load(BrokerConfig(kafka_port=0, kafka_security_protocol="SSL",
                                           **files.broker_settings(mutual=True)))
    assert plain.server is not None and mutual.server is not None
    assert plain.server.minimum_version == ssl.TLSVersion.TLSv1_2
    assert (plain.server.verify_mode, mutual.server.verify_mode) == (ssl.CERT_NONE, ssl.CERT_REQUIRED)
    assert plain.broker_client is None  # the 0.7 port (and replica traffic) stays plaintext
    assert TlsContexts.load(BrokerConfig()).server is None


def test_an_encrypted_key_needs_its_password(tmp_path):
    from cryptography.hazmat.primitives import serialization

    files = make_certificates(str(tmp_path))
    with open(files.broker_key_path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"s3cret")))
    config = BrokerConfig(kafka_port=0, kafka_security_protocol="SSL",
                          **{**files.broker_settings(), "ssl_key_location": str(encrypted)})
    with pytest.raises(TlsSettingError, match="is encrypted: give ssl.key.password"):
        TlsContexts.load(config)
    with pytest.raises(TlsSettingError, match="wrong ssl.key.password"):
        TlsContexts.load(config.replace(ssl_key_password="wrong"))
    assert TlsContexts.load(config.replace(ssl_key_password="s3cret")).server is not None


def test_the_server_refuses_renegotiation(tmp_path):
    import ssl

    files = make_certificates(str(tmp_path))
    server = TlsContexts.load(BrokerConfig(kafka_port=0, kafka_security_protocol="SSL", **files.broker_settings())).server
    assert server is not None and server.options & ssl.OP_NO_RENEGOTIATION
