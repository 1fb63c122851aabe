"""The ACL of each partition and log-directory api (docs/protocol.md §18.3's table), on a broker with ACLs on
and none granted: every one refused with its error, and nothing changed."""

from __future__ import annotations

from datetime import timedelta

from kio.schema.alter_partition_reassignments.v0 import request as alter_reassignments
from kio.schema.alter_replica_log_dirs.v2 import request as alter_dirs
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.describe_log_dirs.v2 import request as describe_dirs
from kio.schema.describe_log_dirs.v4 import request as describe_dirs_v4
from kio.schema.describe_topic_partitions.v0 import request as describe_partitions
from kio.schema.elect_leaders.v2 import request as elect
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0 import request as list_reassignments
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from tests.helpers.kafka_wire import exchange
from trikafka.testing import running_kafka_broker

TIMEOUT = i32Timedelta.parse(timedelta(seconds=5))
TOPIC = TopicName("any")


def test_each_api_is_refused_without_its_acl(tmp_path):
    with running_kafka_broker(str(tmp_path), authorizer="acl") as kafka:  # ANONYMOUS, no ACLs
        def ask(api_key: int, version: int, body):
            return exchange(kafka.bootstrap, api_key, version, body)

        deleted = ask(21, 2, delete_records.DeleteRecordsRequest(timeout=TIMEOUT, topics=(
            delete_records.DeleteRecordsTopic(name=TOPIC, partitions=(
                delete_records.DeleteRecordsPartition(partition_index=i32(0), offset=i64(5)),)),)))
        assert deleted.topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed

        described = ask(35, 2, describe_dirs.DescribeLogDirsRequest(topics=None))
        assert described.results == ()  # v2 has no error of the whole answer: no directory listed
        described = ask(35, 4, describe_dirs_v4.DescribeLogDirsRequest(topics=None))
        assert (described.error_code, described.results) == (ErrorCode.cluster_authorization_failed, ())
        moved = ask(34, 2, alter_dirs.AlterReplicaLogDirsRequest(dirs=(alter_dirs.AlterReplicaLogDir(
            path=str(tmp_path), topics=(alter_dirs.AlterReplicaLogDirTopic(name=TOPIC, partitions=(i32(0),)),)),)))
        assert moved.results[0].partitions[0].error_code == ErrorCode.cluster_authorization_failed

        partitions = ask(75, 0, describe_partitions.DescribeTopicPartitionsRequest(
            topics=(describe_partitions.TopicRequest(name=TOPIC),), response_partition_limit=i32(10)))
        assert [(t.name, t.error_code) for t in partitions.topics] == [(TOPIC, ErrorCode.topic_authorization_failed)]

        elected = ask(43, 2, elect.ElectLeadersRequest(election_type=i8(0), timeout=TIMEOUT, topic_partitions=(
            elect.TopicPartitions(topic=TOPIC, partitions=(i32(0),)),)))
        assert elected.replica_election_results[0].partition_result[0].error_code == \
            ErrorCode.cluster_authorization_failed
        assert elected.error_code == ErrorCode.cluster_authorization_failed  # the whole answer's too, as Kafka's

        altered = ask(45, 0, alter_reassignments.AlterPartitionReassignmentsRequest(timeout=TIMEOUT, topics=(
            alter_reassignments.ReassignableTopic(name=TOPIC, partitions=(alter_reassignments.ReassignablePartition(
                partition_index=i32(0), replicas=(BrokerId(0),)),)),)))
        assert altered.error_code == ErrorCode.cluster_authorization_failed
        listed = ask(46, 0, list_reassignments.ListPartitionReassignmentsRequest(timeout=TIMEOUT, topics=None))
        assert listed.error_code == ErrorCode.cluster_authorization_failed
