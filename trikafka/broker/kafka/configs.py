"""AlterConfigs and IncrementalAlterConfigs (docs/protocol.md §16.4).

Each resource's request becomes one edit of its stored settings.  A topic's
``topics.TopicService.alter`` checks (as CreateTopics does) and stores (the
settings file standalone, ZooKeeper in a cluster); a broker's (§20.4) is the
entity ``brokers/<id>`` or ``brokers/<default>``, checked as the settings at
start are, stored with the other entities (§20.1) and applied by every
broker it concerns.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request

from ..config import DYNAMIC_SETTINGS, ConfigError
from ..dynamic_config import DEFAULT_BROKER_ENTITY, broker_entity, check_dynamic_key, text
from ..topic_settings import CLEANUP_POLICY
from .acl.model import CLUSTER_NAME, ResourceType
from .needs import ConfigsHost
from .entities import NO_THROTTLE, Reply
from .topics import RESOURCE_BROKER, RESOURCE_TOPIC, TopicError, authorize

# An edit of a resource's stored settings (keys as stored; a topic's without record.format).
Edit = Callable[[dict[str, str]], dict[str, str]]
# A key's value in force given the resource's stored settings: what APPEND and SUBTRACT start from.
Effective = Callable[[dict[str, str], str], str]
# The settings whose value is a comma-separated list: the only ones APPEND and SUBTRACT apply to.
LIST_KEYS = frozenset({CLEANUP_POLICY, "log.cleanup.policy"})


def _set(effective: Effective, settings: dict[str, str], key: str, value: str | None) -> None:
    if value is None:
        raise TopicError(ErrorCode.invalid_config, f"SET of config {key!r} needs a value")
    settings[key] = value


def _delete(effective: Effective, settings: dict[str, str], key: str, value: str | None) -> None:
    settings.pop(key, None)


def _list_items(effective: Effective, settings: dict[str, str], key: str, verb: str) -> list[str]:
    if key not in LIST_KEYS:
        raise TopicError(ErrorCode.invalid_config, f"{verb} is not allowed for config {key!r}: it is not a list")
    return [item.strip() for item in effective(settings, key).split(",") if item.strip()]


def _values(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _append(effective: Effective, settings: dict[str, str], key: str, value: str | None) -> None:
    items = _list_items(effective, settings, key, "APPEND")
    settings[key] = ",".join(items + [v for v in _values(value) if v not in items])


def _subtract(effective: Effective, settings: dict[str, str], key: str, value: str | None) -> None:
    removed = set(_values(value))
    settings[key] = ",".join(item for item in _list_items(effective, settings, key, "SUBTRACT")
                             if item not in removed)


# IncrementalAlterConfigs' config_operation -> what it does to the stored settings.
_OPERATIONS: dict[int, Callable[[Effective, dict[str, str], str, str | None], None]] = {
    0: _set, 1: _delete, 2: _append, 3: _subtract,
}


def _incremental_edit(effective: Effective, configs: Iterable[Any]) -> Edit:
    for config in configs:
        if config.config_operation not in _OPERATIONS:
            raise TopicError(ErrorCode.invalid_request, f"unknown config operation {config.config_operation} "
                                                        f"for {config.name!r}")

    def edit(current: dict[str, str]) -> dict[str, str]:
        settings = dict(current)
        for config in configs:
            _OPERATIONS[config.config_operation](effective, settings, config.name, config.value)
        return settings
    return edit


def _replacing_edit(effective: Effective, configs: Iterable[Any]) -> Edit:
    new = {config.name: config.value for config in configs if config.value is not None}
    return lambda current: dict(new)


async def _alter_broker(service: ConfigsHost, name: str, keys: list[str], edit_of: Callable[[Effective], Edit],
                        validate_only: bool) -> None:
    """Alter*Configs on a broker resource (§20.4): the entity ``brokers/<id>`` or ``brokers/<default>``."""
    settings = service.broker_settings
    try:
        path = broker_entity(name)
    except ConfigError as exc:
        raise TopicError(ErrorCode.invalid_request, str(exc)) from None
    try:
        for key in keys:
            check_dynamic_key(key)
    except ConfigError as exc:
        raise TopicError(ErrorCode.invalid_config, str(exc)) from None
    edit = edit_of(lambda stored, key: stored.get(key, text(settings.current, DYNAMIC_SETTINGS[key])))
    entities = service.entity_configs.entities
    after = edit(dict(entities.get(path, {})))
    try:
        if path in (settings.own_entity(), DEFAULT_BROKER_ENTITY):
            settings.check({**entities, path: after})
        else:  # another broker's: checked on this broker's static settings
            settings.check({settings.own_entity(): after})
    except ConfigError as exc:
        raise TopicError(ErrorCode.invalid_config, str(exc)) from None
    if not validate_only:
        await service.entity_configs.update({path: edit})


async def _alter(service: ConfigsHost, request: Request, api: KafkaApi,
                 edit_of: Callable[[Effective, Iterable[Any]], Edit]) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    results = []
    for resource in body.resources:
        code, message = ErrorCode.none, None
        name = resource.resource_name
        keys = [config.name for config in resource.configs]
        try:
            if len(set(keys)) != len(keys):
                raise TopicError(ErrorCode.invalid_request, f"a config key is named twice for {name!r}")
            if resource.resource_type == RESOURCE_TOPIC:
                authorize(service, api, name)
                for key in keys:
                    service.topics.check_alterable(name, key)
                await service.topics.alter(
                    name, edit_of(functools.partial(service.topics.effective, name), resource.configs),
                    validate_only=body.validate_only)
            elif resource.resource_type == RESOURCE_BROKER:
                authorize(service, api, CLUSTER_NAME, ResourceType.CLUSTER)
                configs = resource.configs
                await _alter_broker(service, name, keys, lambda effective: edit_of(effective, configs),
                                    body.validate_only)
            else:
                raise TopicError(ErrorCode.invalid_request, f"resource type {resource.resource_type} is not served")
        except TopicError as exc:
            code, message = exc.code, str(exc)
        results.append(reply.nested("AlterConfigsResourceResponse", error_code=code, error_message=message,
                                    resource_type=resource.resource_type, resource_name=name))
    return reply.response(throttle_time=NO_THROTTLE, responses=tuple(results))


async def incremental_alter_configs(service: ConfigsHost, request: Request) -> Any:
    """IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT on each resource's stored settings."""
    return await _alter(service, request, KafkaApi.INCREMENTAL_ALTER_CONFIGS, _incremental_edit)


async def alter_configs(service: ConfigsHost, request: Request) -> Any:
    """AlterConfigs: each resource's stored settings become exactly those the request names."""
    return await _alter(service, request, KafkaApi.ALTER_CONFIGS, _replacing_edit)
