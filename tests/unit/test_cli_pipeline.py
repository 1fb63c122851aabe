"""`trikafka pipeline ...` hands every argument to the Spark pipeline's own parser."""

import pytest

from trikafka import cli


def test_pipeline_help_is_the_pipeline_parsers(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["pipeline", "load", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--checkpoint" in out and "--topic" in out


def test_pipeline_without_a_cluster_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["pipeline", "generate", "--topic", "t"])
    assert exit_info.value.code == 2
    assert "--brokers" in capsys.readouterr().err


@pytest.mark.parametrize("message, line", [
    ("[PYTHON_DATA_SOURCE_ERROR] Failed to plan: trikafka.spark.planning.PlanningError: no broker\n SQLSTATE: 38000",
     "no broker"),
    ("[X] outer: ValueError: bad value\nmore", "bad value"),
    ("plain first line\nsecond", "plain first line"),
])
def test_a_spark_error_is_read_as_its_cause(message, line):
    from trikafka.spark.session import error_line

    assert error_line(Exception(message)) == line
