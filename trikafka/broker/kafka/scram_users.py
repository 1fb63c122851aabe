"""DescribeUserScramCredentials and AlterUserScramCredentials (docs/protocol.md §18.2, KIP-554).

Both read and change the credential store of ``trikafka users`` (``credentials.CredentialStore``):
the users file of a standalone broker, the users' znodes in ZooKeeper mode.
"""

from __future__ import annotations

from typing import Any, Iterable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request
from trikafka.kafka.sasl import (MIN_ITERATIONS, SaslMechanism, ScramCredential, check_user_name, scram_hash,
                                 scram_keys)

from ..credentials import UserRecord
from .needs import ScramApis
from .entities import NO_THROTTLE, Reply

# Kafka's numbers of the SCRAM mechanisms (KIP-554's ScramMechanism); 0 is UNKNOWN.
MECHANISM_NUMBERS: dict[int, SaslMechanism] = {1: SaslMechanism.SCRAM_SHA_256, 2: SaslMechanism.SCRAM_SHA_512}
_NUMBER_OF = {mechanism: number for number, mechanism in MECHANISM_NUMBERS.items()}
# Kafka's bound on a SCRAM credential's iterations (ScramMechanism.maxIterations).
MAX_ITERATIONS = 16384

# Kafka's message of CLUSTER_AUTHORIZATION_FAILED, which these apis' answers carry.
CLUSTER_DENIED_MESSAGE = "Cluster authorization failed."

# (error, message) of one user's result; None: accepted.
Refusal = tuple[ErrorCode, str] | None


async def describe_user_scram_credentials(service: ScramApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    if (denied := service.authorizer.denied(KafkaApi.DESCRIBE_USER_SCRAM_CREDENTIALS)) is not None:
        # The message is Kafka's; librdkafka 2.x frees a null one and aborts.
        return reply.response(throttle_time=NO_THROTTLE, error_code=denied, error_message=CLUSTER_DENIED_MESSAGE,
                              results=())
    users = await service.credential_store.users()
    asked = [u.name for u in body.users] if body.users else sorted(users)
    results = []
    for name in dict.fromkeys(asked):  # first occurrence order
        refusal: Refusal = None
        if asked.count(name) > 1:
            refusal = (ErrorCode.duplicate_resource,
                       "Cannot describe SCRAM credentials for the same user twice in a single request")
        elif not users.get(name):
            refusal = (ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist")
        infos = () if refusal is not None else tuple(
            reply.nested("CredentialInfo", mechanism=i8(_NUMBER_OF[mechanism]), iterations=i32(credential.iterations))
            for mechanism, credential in sorted(users[name].items(), key=lambda item: _NUMBER_OF[item[0]]))
        results.append(reply.nested("DescribeUserScramCredentialsResult", user=name,
                                    error_code=ErrorCode.none if refusal is None else refusal[0],
                                    error_message=None if refusal is None else refusal[1], credential_infos=infos))
    return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                          results=tuple(results))


async def alter_user_scram_credentials(service: ScramApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    named = list(dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions]))
    refusals: dict[str, Refusal] = {}
    if (denied := service.authorizer.denied(KafkaApi.ALTER_USER_SCRAM_CREDENTIALS)) is not None:
        refusals = {name: (denied, CLUSTER_DENIED_MESSAGE) for name in named}
    else:
        users = await service.credential_store.users()
        changes: dict[str, UserRecord | None] = {}
        for name in named:
            deletions = [d for d in body.deletions if d.name == name]
            upsertions = [u for u in body.upsertions if u.name == name]
            refusal, record = _altered(name, users.get(name, {}), deletions, upsertions)
            refusals[name] = refusal
            if refusal is None:
                changes[name] = record or None  # no mechanism left: the user goes
        if changes:
            await service.credential_store.apply(changes)
    return reply.response(throttle_time=NO_THROTTLE, results=tuple(
        reply.nested("AlterUserScramCredentialsResult", user=name,
                     error_code=ErrorCode.none if (refusal := refusals[name]) is None else refusal[0],
                     error_message=None if refusal is None else refusal[1])
        for name in named))


def _altered(name: str, stored: UserRecord, deletions: list[Any], upsertions: list[Any]) -> tuple[Refusal, UserRecord]:
    """One user's changes checked in Kafka's order, and the record they leave (§18.2)."""
    numbers = [d.mechanism for d in deletions] + [u.mechanism for u in upsertions]
    if len(numbers) != len(set(numbers)):
        return (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"), stored
    try:
        check_user_name(name)
    except ValueError as exc:
        return (ErrorCode.unacceptable_credential, f"Username is not acceptable: {exc}"), stored
    if any(number not in MECHANISM_NUMBERS for number in numbers):
        return (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"), stored
    for upsertion in upsertions:
        if (refusal := _upsertion_refused(upsertion)) is not None:
            return refusal, stored
    record = dict(stored)
    for deletion in deletions:
        if record.pop(MECHANISM_NUMBERS[deletion.mechanism], None) is None:
            return (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"), stored
    record.update(_credentials(upsertions))
    return None, record


def _upsertion_refused(upsertion: Any) -> Refusal:
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, f"Too few iterations: {upsertion.iterations} < {MIN_ITERATIONS}"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, f"Too many iterations: {upsertion.iterations} > {MAX_ITERATIONS}"
    if not upsertion.salt or not upsertion.salted_password:
        return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
    return None


def _credentials(upsertions: Iterable[Any]) -> UserRecord:
    """Each upsertion's stored record: StoredKey and ServerKey of the client's SaltedPassword (RFC 5802 §3)."""
    record = {}
    for upsertion in upsertions:
        mechanism = MECHANISM_NUMBERS[upsertion.mechanism]
        _client_key, stored_key, server_key = scram_keys(scram_hash(mechanism), upsertion.salted_password)
        record[mechanism] = ScramCredential(upsertion.salt, upsertion.iterations, stored_key, server_key)
    return record
