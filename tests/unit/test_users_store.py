"""The SASL credential store and ``trikafka users`` (docs/protocol.md §18.2), in process."""

from __future__ import annotations

import io
import json

import pytest

from trikafka.broker.credentials import CredentialFile, FileCredentials, decode_record, encode_record, new_record
from trikafka.cli import main
from trikafka.kafka.sasl import SaslMechanism, check_password


def users(monkeypatch, *args: str, stdin: str = "") -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    return main(["users", *args])


def test_add_list_delete_on_a_log_dir(tmp_path, monkeypatch, capsys):
    d = str(tmp_path)
    assert users(monkeypatch, "add", "bob", "--password-stdin", "--log-dir", d, stdin="pw-b\n") == 0
    assert users(monkeypatch, "add", "amy", "--password-stdin", "--iterations", "8192", "--log-dir", d,
                 stdin="pw-a\n") == 0
    capsys.readouterr()
    assert users(monkeypatch, "list", "--log-dir", d) == 0
    assert capsys.readouterr().out.splitlines() == ["amy\tSCRAM-SHA-512,SCRAM-SHA-256",
                                                    "bob\tSCRAM-SHA-512,SCRAM-SHA-256"]
    stored = CredentialFile(d).read()
    assert stored["amy"][SaslMechanism.SCRAM_SHA_256].iterations == 8192
    assert check_password(SaslMechanism.SCRAM_SHA_512, stored["bob"][SaslMechanism.SCRAM_SHA_512], "pw-b")
    assert "pw-b" not in (tmp_path / ".trikafka-users.json").read_text()
    assert users(monkeypatch, "delete", "bob", "--log-dir", d) == 0
    assert users(monkeypatch, "delete", "bob", "--log-dir", d) == 1
    assert "no user bob" in capsys.readouterr().err
    assert set(CredentialFile(d).read()) == {"amy"}


@pytest.mark.parametrize("args, stdin, message", [
    (("add", "x", "--password-stdin", "--iterations", "10"), "pw\n", "iterations must be at least 4096"),
    (("add", "x", "--password-stdin"), "", "no password on standard input"),
    (("add", "a,b", "--password-stdin"), "pw\n", "no ',', '=', '/'"),
])
def test_refusals_are_one_line(tmp_path, monkeypatch, capsys, args, stdin, message):
    assert users(monkeypatch, *args, "--log-dir", str(tmp_path), stdin=stdin) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_broken_users_file_is_a_clear_error(tmp_path, monkeypatch, capsys):
    (tmp_path / ".trikafka-users.json").write_text("{not json")
    assert users(monkeypatch, "list", "--log-dir", str(tmp_path)) == 1
    assert ".trikafka-users.json" in capsys.readouterr().err


def test_records_round_trip_and_refuse_weak_iterations():
    record = new_record("pw")
    assert decode_record(encode_record(record)) == record
    weak = json.loads(encode_record(record))
    weak["SCRAM-SHA-256"]["iterations"] = 1
    with pytest.raises(ValueError, match="iterations"):
        decode_record(json.dumps(weak).encode())


async def test_a_broker_sees_the_file_change_at_the_next_refresh(tmp_path):
    credentials = FileCredentials(str(tmp_path))
    await credentials.refresh()
    assert credentials.lookup("carl", SaslMechanism.SCRAM_SHA_512) is None
    CredentialFile(str(tmp_path)).add("carl", new_record("pw"))
    await credentials.refresh()
    assert credentials.lookup("carl", SaslMechanism.SCRAM_SHA_512) is not None
    CredentialFile(str(tmp_path)).delete("carl")
    await credentials.refresh()
    assert credentials.lookup("carl", SaslMechanism.SCRAM_SHA_512) is None
