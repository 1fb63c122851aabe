"""The test certificates of TLS tests (docs/protocol.md §18.1), made by ``trikafka.testing.certificates``.

The session fixture ``certificates`` (a pytest plugin of ``tests/conftest.py``)
makes one set for the whole run.
"""

from __future__ import annotations

import pytest

from trikafka.testing.certificates import CertificateFiles, ClientCertificate, make_certificates

__all__ = ["CertificateFiles", "ClientCertificate", "certificates", "make_certificates"]


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    """One test CA, broker certificate and untrusted CA for every TLS test of the session."""
    return make_certificates(str(tmp_path_factory.mktemp("certificates")))
