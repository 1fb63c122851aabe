"""The SASL credential store (docs/protocol.md §18.2): salted SCRAM records, never passwords.

* ``new_record`` / ``encode_record`` / ``decode_record``: one user's record
  (both SCRAM mechanisms) and its JSON bytes, the same in both stores;
* ``CredentialFile``: a standalone broker's ``<log-dir>/.trikafka-users.json``
  (blocking: the CLI calls it, a broker only from a worker thread);
* ``FileCredentials`` and ``ZooKeeperCredentials``: what a broker's SASL
  servers read (``lookup``), kept current from the file (re-read at an
  authentication when it changed) or from ZooKeeper (watches).
"""

from __future__ import annotations

import base64
import json
import logging
import os
from typing import Any, Mapping, Protocol

import trio

from trikafka.kafka.sasl import (MIN_ITERATIONS, SCRAM_MECHANISMS, SaslMechanism, ScramCredential, b64,
                                 check_user_name, scram_credential)
from trikafka.log.fs import OsFileSystem
from trikafka.log.names import USERS_FILE
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import NodeExistsError, NoNodeError

from .seams import RunBlocking

logger = logging.getLogger(__name__)

RECORD_VERSION = 1

# A user's stored credentials, per SCRAM mechanism.
UserRecord = Mapping[SaslMechanism, ScramCredential]


class CredentialError(ValueError):
    """A stored record or users file that does not parse, or a user the store cannot hold."""


def new_record(password: str, iterations: int = MIN_ITERATIONS) -> UserRecord:
    """Both SCRAM mechanisms' records of ``password`` (fresh salts; PBKDF2 work)."""
    if iterations < MIN_ITERATIONS:
        raise CredentialError(f"iterations must be at least {MIN_ITERATIONS}, got {iterations}")
    return {m: scram_credential(m, password, iterations=iterations) for m in SCRAM_MECHANISMS}


def _record_json(record: UserRecord) -> dict[str, Any]:  # Any: JSON values
    out: dict[str, Any] = {"version": RECORD_VERSION}
    for mechanism, c in record.items():
        out[mechanism.value] = {"salt": b64(c.salt), "iterations": c.iterations,
                                "stored_key": b64(c.stored_key), "server_key": b64(c.server_key)}
    return out


def encode_record(record: UserRecord) -> bytes:
    """A user's record as stored (§18.2's JSON)."""
    return json.dumps(_record_json(record), sort_keys=True).encode()


def _record_from_json(fields: Any) -> UserRecord:  # Any: parsed JSON, checked here
    if not isinstance(fields, dict) or fields.get("version") != RECORD_VERSION:
        raise CredentialError("not a version-1 credential record")
    record: dict[SaslMechanism, ScramCredential] = {}
    for mechanism in SCRAM_MECHANISMS:
        entry = fields.get(mechanism.value)
        if entry is None:
            continue
        try:
            credential = ScramCredential(base64.b64decode(entry["salt"], validate=True), int(entry["iterations"]),
                                         base64.b64decode(entry["stored_key"], validate=True),
                                         base64.b64decode(entry["server_key"], validate=True))
        except (KeyError, TypeError, ValueError) as exc:
            raise CredentialError(f"bad {mechanism.value} credential: {exc}") from None
        if credential.iterations < MIN_ITERATIONS:
            raise CredentialError(f"{mechanism.value} credential has {credential.iterations} iterations")
        record[mechanism] = credential
    return record


def decode_record(data: bytes) -> UserRecord:
    """A stored record; ``CredentialError`` if it does not parse."""
    try:
        return _record_from_json(json.loads(data))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CredentialError(f"credential record is not JSON: {exc}") from None


def lookup_in(users: Mapping[str, UserRecord], user: str, mechanism: SaslMechanism) -> ScramCredential | None:
    """The stored credential of ``user`` for ``mechanism``, None when there is none."""
    record = users.get(user)
    return None if record is None else record.get(mechanism)


class CredentialFile:
    """A standalone broker's users file (§18.2), written whole to a temporary file, fsynced and renamed."""

    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        self.path = os.path.join(log_dir, USERS_FILE)

    def signature(self) -> tuple[int, int, int] | None:
        """(inode, size, mtime ns) of the file, None when absent: a change means a re-read."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def read(self) -> dict[str, UserRecord]:
        """Every user's record ({} when there is no file); ``CredentialError`` for a file that does not parse."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return {}
        try:
            fields = json.loads(data)
            users = fields["users"]
            if fields.get("version") != RECORD_VERSION or not isinstance(users, dict):
                raise CredentialError(f"{self.path}: not a version-1 users file")
            return {str(name): _record_from_json(record) for name, record in users.items()}
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CredentialError(f"{self.path}: {exc}") from None

    def _write(self, users: Mapping[str, UserRecord]) -> None:
        fs = OsFileSystem()
        body = {"version": RECORD_VERSION, "users": {name: _record_json(users[name]) for name in sorted(users)}}
        tmp = f"{self.path}.tmp"
        fs.write_synced(tmp, (json.dumps(body, sort_keys=True, indent=1) + "\n").encode())
        fs.rename(tmp, self.path)
        fs.fsync_dir(self.log_dir)

    def add(self, name: str, record: UserRecord) -> None:
        """Store (or replace) ``name``'s record."""
        self.apply({name: record})

    def apply(self, changes: Mapping[str, UserRecord | None]) -> None:
        """Store each user's new record, or delete the user (None), in one write of the file."""
        for name in changes:
            _checked_name(name)
        os.makedirs(self.log_dir, exist_ok=True)
        users = self.read()
        for name, record in changes.items():
            if record is None:
                users.pop(name, None)
            else:
                users[name] = record
        self._write(users)

    def delete(self, name: str) -> bool:
        """Remove ``name``; False when there was no such user."""
        users = self.read()
        if users.pop(name, None) is None:
            return False
        self._write(users)
        return True


def _checked_name(name: str) -> str:
    try:
        return check_user_name(name)
    except ValueError as exc:
        raise CredentialError(str(exc)) from None


class CredentialStore(Protocol):
    """Where a broker reads and changes the stored users over the Kafka protocol (§18.2, KIP-554)."""

    async def users(self) -> dict[str, UserRecord]:
        """Every stored user's record."""

    async def apply(self, changes: Mapping[str, UserRecord | None]) -> None:
        """Store each user's new record, or delete the user (None); returns once stored."""


class FileCredentialStore:
    """A standalone broker's users file, read and written in worker threads."""

    def __init__(self, log_dir: str, run_blocking: RunBlocking):
        self.file = CredentialFile(log_dir)
        self._run_blocking = run_blocking
        self._lock = trio.Lock()  # one read-modify-write of the file at a time

    async def users(self) -> dict[str, UserRecord]:
        return await self._run_blocking(self.file.read)  # type: ignore[no-any-return]

    async def apply(self, changes: Mapping[str, UserRecord | None]) -> None:
        async with self._lock:
            await self._run_blocking(self.file.apply, changes)


class ZooKeeperCredentialStore:
    """The users' znodes of a cluster: one znode per user, each set or deleted on its own."""

    def __init__(self, zk: ZooKeeperClient):
        self._zk = zk

    async def users(self) -> dict[str, UserRecord]:
        return await zk_users(self._zk)

    async def apply(self, changes: Mapping[str, UserRecord | None]) -> None:
        for name, record in changes.items():
            if record is None:
                await zk_delete_user(self._zk, name)
            else:
                await zk_add_user(self._zk, name, record)


class Credentials(Protocol):
    """What a broker's SASL servers read: ``lookup`` (in memory), made current by ``refresh``."""

    def lookup(self, user: str, mechanism: SaslMechanism) -> ScramCredential | None:
        """The stored credential, None for an unknown user (safe to call from a worker thread)."""

    async def refresh(self) -> None:
        """Bring ``lookup`` up to date before an authentication (cheap when nothing changed)."""


class FileCredentials:
    """A standalone broker's view of its users file: re-read in a worker thread when its signature changed."""

    def __init__(self, log_dir: str):
        self.file = CredentialFile(log_dir)
        self._users: dict[str, UserRecord] = {}
        self._signature: tuple[int, int, int] | None = None
        self._lock = trio.Lock()

    def lookup(self, user: str, mechanism: SaslMechanism) -> ScramCredential | None:
        return lookup_in(self._users, user, mechanism)

    async def refresh(self) -> None:
        async with self._lock:
            users, signature = await trio.to_thread.run_sync(self._read_if_changed)
            if users is not None:
                self._users, self._signature = users, signature

    def _read_if_changed(self) -> tuple[dict[str, UserRecord] | None, tuple[int, int, int] | None]:
        signature = self.file.signature()
        if signature == self._signature:
            return None, signature
        try:
            return self.file.read(), signature
        except CredentialError as exc:  # a broken file keeps the users last read
            logger.warning("users file not read: %s", exc)
            return None, self._signature


class ZooKeeperCredentials:
    """A broker's view of ``/trikafka/config/users``: a children watch, and a data watch per user (§18.2)."""

    def __init__(self, zk: ZooKeeperClient):
        self._zk = zk
        self._users: dict[str, UserRecord] = {}

    def lookup(self, user: str, mechanism: SaslMechanism) -> ScramCredential | None:
        return lookup_in(self._users, user, mechanism)

    async def refresh(self) -> None:
        """The watches keep the users current."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the users' znodes until cancelled; started once the users present are read."""
        await self._zk.ensure_path(paths.USER_CONFIGS)
        watching: dict[str, trio.CancelScope] = {}
        started = False
        async with trio.open_nursery() as nursery:
            async for children in self._zk.watch_children(paths.USER_CONFIGS):
                names = set(children or ())
                for gone in set(watching) - names:
                    watching.pop(gone).cancel()
                    self._users.pop(gone, None)
                for name in sorted(names - set(watching)):
                    watching[name] = await nursery.start(self._watch_user, name)
                if not started:
                    task_status.started()
                    started = True

    async def _watch_user(self, name: str, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            try:
                path = paths.user_config(name)
            except ValueError:
                task_status.started(scope)
                return
            first = True
            async for value in self._zk.watch_data(path):
                if value is None:
                    self._users.pop(name, None)
                else:
                    try:
                        self._users[name] = decode_record(value[0])
                    except CredentialError as exc:
                        self._users.pop(name, None)
                        logger.warning("user %r: %s", name, exc)
                if first:
                    task_status.started(scope)
                    first = False


async def zk_add_user(zk: ZooKeeperClient, name: str, record: UserRecord) -> None:
    """Store (or replace) ``name``'s record in ZooKeeper."""
    path = paths.user_config(_checked_name(name))
    data = encode_record(record)
    try:
        await zk.create(path, data, makepath=True)
    except NodeExistsError:
        await zk.set(path, data)


async def zk_delete_user(zk: ZooKeeperClient, name: str) -> bool:
    """Remove ``name`` from ZooKeeper; False when there was no such user."""
    try:
        await zk.delete(paths.user_config(_checked_name(name)))
    except NoNodeError:
        return False
    return True


async def zk_users(zk: ZooKeeperClient) -> dict[str, UserRecord]:
    """Every user stored in ZooKeeper (a znode that does not parse is skipped, with a warning)."""
    try:
        names = await zk.children(paths.USER_CONFIGS)
    except NoNodeError:
        return {}
    users: dict[str, UserRecord] = {}
    for name in sorted(names):
        try:
            users[name] = decode_record((await zk.get(paths.user_config(name)))[0])
        except (NoNodeError, ValueError) as exc:
            logger.warning("user %r skipped: %s", name, exc)
    return users
