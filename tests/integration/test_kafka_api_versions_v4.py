"""ApiVersions v4 (docs/protocol.md §16.3): a broker asked at v4 answers at v4 with the whole table."""

from __future__ import annotations

from kafka import KafkaAdminClient
from kafka.protocol.metadata import ApiVersionsRequest as PythonApiVersionsRequest
from kio.schema.api_versions.v4.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_wire import exchange
from trikafka.kafka.apis import KafkaApi
from trikafka.testing import running_kafka_broker


def test_a_v4_question_gets_a_v4_answer_and_kafka_python_reads_it():
    with running_kafka_broker(num_partitions=1) as kafka:
        answer = exchange(kafka.bootstrap, 18, 4, ApiVersionsRequest(client_software_name="t",
                                                                     client_software_version="1"))
        assert type(answer).__version__ == 4 and answer.error_code == ErrorCode.none
        assert {(e.api_key, e.min_version, e.max_version) for e in answer.api_keys} == {
            (int(api), api.min_version, api.max_version) for api in KafkaApi}
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        try:
            data = admin.get_broker_version_data(0)
            assert data.api_version(PythonApiVersionsRequest) == 4  # what kafka-python asks now (its highest)
            assert data.broker_version == (3, 0)  # v4 is no version kafka-python tells a release by
        finally:
            admin.close()
