"""``trikafka mirror`` / ``trikafka audit`` argument handling and the audit table (no I/O)."""

from __future__ import annotations

import json

import pytest

from trikafka.cli import build_parser, main
from trikafka.mirror.audit import format_table, report
from trikafka.mirror.commands import mirror_config
from trikafka.mirror.tally import AuditRow


def test_a_bad_whitelist_is_a_one_line_error_before_any_connection(capsys):
    assert main(["mirror", "--source-zookeeper", "127.0.0.1:1", "--target-zookeeper", "127.0.0.1:1",
                 "--whitelist", "("]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trikafka: '(' is an invalid regex")


def test_mirror_arguments():
    args = build_parser().parse_args(["mirror", "--source-zookeeper", "a:1", "--source-zookeeper", "b:2/x",
                                      "--target-zookeeper", "c:3", "--whitelist", "t.*", "--acks", "-1"])
    config = mirror_config(args)
    assert (config.sources, config.target, config.whitelist, config.acks, config.group) == (
        ["a:1", "b:2/x"], "c:3", "t.*", -1, "trikafka-mirror")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["mirror", "--target-zookeeper", "c:3", "--whitelist", "t"])  # no source


ROWS = [AuditRow("t", 0, 60_000, "src", 3, 3, 3, 0, 0, 0),
        AuditRow("t", 0, 60_000, "dst", 3, 4, 2, 1, 2, 0),
        AuditRow("t", 0, 60_000, "spark:x", 3, None, 3, 0, 0, 0)]


def test_the_table_shows_only_windows_with_problems_unless_asked():
    lines = format_table(ROWS).splitlines()
    assert lines[0].split()[:2] == ["topic", "window"]
    assert [line.split()[2] for line in lines[1:-1]] == ["dst"]
    assert lines[-1] == "1 window(s), 3 row(s): 1 missing, 2 duplicated, 0 unaccounted"
    assert len(format_table(ROWS, everything=True).splitlines()) == 5
    assert "-" in format_table(ROWS, everything=True).splitlines()[3].split()  # a loader holds no messages


def test_the_json_report_has_every_row_and_totals():
    doc = json.loads(json.dumps(report(ROWS)))
    assert (doc["missing"], doc["duplicated"], doc["extra"]) == (1, 2, 0)
    assert [r["tier"] for r in doc["windows"]] == ["src", "dst", "spark:x"]
    assert doc["windows"][2]["held"] is None
