"""What the command families share: defaults, ``--broker`` parsing, the runners that print errors."""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from typing import TYPE_CHECKING, AsyncIterator, Awaitable, Callable, TypeVar

import trio

from trikafka.cli.message_format import DEFAULT_FORMAT, MessageFormat, Printed
from trikafka.kafka.sasl import SaslMechanism, enabled_mechanisms
from trikafka.util.errors import leaf_exceptions
from trikafka.util.settings import read_secret
from trikafka.wire.ports import DEFAULT_HOST, DEFAULT_KAFKA_PORT, DEFAULT_PORT

if TYPE_CHECKING:
    from trikafka.kafka.sasl_client import SaslLogin

DEFAULT_BROKER = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
DEFAULT_KAFKA_BOOTSTRAP = f"{DEFAULT_HOST}:{DEFAULT_KAFKA_PORT}"
LOCAL_KAFKA = ""  # ``--kafka`` without a value: the local `trikafka serve`'s Kafka listener
KAFKA_LISTENER_KEY = "kafka"  # the listener file's second line: ``kafka HOST:PORT`` (docs/protocol.md §7.1)
READ_BYTES = 256 * 1024
FALLBACK_ZOOKEEPER = "127.0.0.1:2181"  # ZooKeeper's own port, when no local broker says otherwise
DEFAULT_DATA_DIR = "trikafka-data"  # `trikafka serve`'s default --log-dir
ZOOKEEPER_CONNECT_FILE = "zookeeper-connect"  # written by `serve` next to its private ZooKeeper's data
SASL_MECHANISM_NAMES = enabled_mechanisms()
SASL_PASSWORD_VARIABLE = "TRIKAFKA_SASL_PASSWORD"  # --sasl-mechanism's password without --sasl-password-file

ArgsT = TypeVar("ArgsT")
ResultT = TypeVar("ResultT")


def zookeeper_connect_file(log_dir: str) -> str:
    """Where ``serve`` with a private ZooKeeper writes its connect string: ``<log_dir>-zookeeper/zookeeper-connect``."""
    return os.path.join(os.path.abspath(log_dir) + "-zookeeper", ZOOKEEPER_CONNECT_FILE)


def default_zookeeper() -> str:
    """The connect string of the private ZooKeeper of ``trikafka serve`` run in this directory with
    the default data dir (read from ``./trikafka-data-zookeeper/zookeeper-connect``), else 127.0.0.1:2181."""
    try:
        with open(zookeeper_connect_file(DEFAULT_DATA_DIR)) as f:
            return f.read().strip() or FALLBACK_ZOOKEEPER
    except OSError:
        return FALLBACK_ZOOKEEPER


def default_broker() -> tuple[str, int]:
    """The address of the ``trikafka serve`` run in this directory with the default data dir
    (``./trikafka-data/.trikafka-listener``, docs/protocol.md §7.1), else 127.0.0.1:9092."""
    try:
        return parse_broker(_listener_lines().get("", DEFAULT_BROKER))
    except argparse.ArgumentTypeError:
        return parse_broker(DEFAULT_BROKER)


def default_kafka_bootstrap() -> str:
    """The Kafka-protocol address of the ``trikafka serve`` run in this directory (the ``kafka
    HOST:PORT`` line of its listener file, docs/protocol.md §7.1), else 127.0.0.1:9093."""
    return _listener_lines().get(KAFKA_LISTENER_KEY, DEFAULT_KAFKA_BOOTSTRAP)


def _listener_lines() -> dict[str, str]:
    """The local listener file's addresses by key: ``""`` the 0.7 one (first line), ``"kafka"``."""
    from trikafka.log.names import LISTENER_FILE

    try:
        with open(os.path.join(DEFAULT_DATA_DIR, LISTENER_FILE)) as f:
            lines = [line.split() for line in f.read().splitlines() if line.strip()]
    except OSError:
        return {}
    found: dict[str, str] = {}
    for fields in lines:
        if len(fields) == 1:
            found.setdefault("", fields[0])
        elif len(fields) == 2:
            found.setdefault(fields[0], fields[1])
    return found


def parse_broker(text: str) -> tuple[str, int]:
    """``[ID:]HOST:PORT`` (or ``HOST``, or ``:PORT``) to a (host, port) pair; default 127.0.0.1:9092.

    The one address syntax of ``trikafka.client.parse_broker_addresses``; the
    commands that talk to one broker refuse a list of several.
    """
    from trikafka.client.addresses import parse_broker_addresses

    try:
        addresses = parse_broker_addresses(text, default_port=DEFAULT_PORT)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if len(addresses) != 1:
        raise argparse.ArgumentTypeError(f"this command talks to one broker, not {len(addresses)}: {text!r}")
    return addresses[0].host, addresses[0].port


def add_broker(p: argparse.ArgumentParser) -> None:
    """The ``--broker``/``--brokers [ID:]HOST:PORT`` option of the commands that talk to one broker."""
    p.add_argument("--broker", "--brokers", dest="broker", metavar="[ID:]HOST:PORT", type=parse_broker,
                   default=None, help=f"the broker to talk to (default: the local `trikafka serve` of "
                                      f"./{DEFAULT_DATA_DIR}, else {DEFAULT_BROKER})")


def add_kafka(p: argparse.ArgumentParser) -> None:
    """The ``--kafka [HOST:PORT[,...]]`` option: talk the Kafka protocol to Kafka-format topics (§16)."""
    p.add_argument("--kafka", nargs="?", const=LOCAL_KAFKA, default=None, metavar="HOST:PORT[,...]",
                   help="use the Apache Kafka protocol (Kafka-format topics, docs/protocol.md §16) through this "
                        f"bootstrap address (alone: the local `trikafka serve`'s, else {DEFAULT_KAFKA_BOOTSTRAP})")
    p.add_argument("--tls-ca", metavar="PEM", help="with --kafka: connect with TLS, trusting these CA certificates "
                                                   "(a listener with --kafka-security SSL, docs/protocol.md §18.1)")
    p.add_argument("--tls-cert", metavar="PEM", help="with --tls-ca: this client certificate (mutual TLS)")
    p.add_argument("--tls-key", metavar="PEM", help="with --tls-cert: its private key")
    p.add_argument("--sasl-mechanism", metavar="MECHANISM", choices=SASL_MECHANISM_NAMES,
                   help="with --kafka: log in with SASL (SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN, docs/protocol.md "
                        "§18.2) as --sasl-username, the password read from the file --sasl-password-file names "
                        f"(first line) or else from ${SASL_PASSWORD_VARIABLE}")
    p.add_argument("--sasl-username", metavar="NAME", help="with --sasl-mechanism: the user")
    p.add_argument("--sasl-password-file", metavar="FILE", help="with --sasl-mechanism: the password's file")


def kafka_ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context ``--tls-ca`` (and ``--tls-cert``/``--tls-key``) ask for, or None: plaintext.
    A file that cannot be used is a ``ClientError`` naming the option and the file (one line)."""
    from trikafka.client.errors import ClientError

    if not args.tls_ca:
        if args.tls_cert or args.tls_key:
            raise ClientError("--tls-cert and --tls-key need --tls-ca")
        return None
    try:
        context = ssl.create_default_context(cafile=args.tls_ca)
    except (OSError, ssl.SSLError) as exc:
        raise ClientError(f"--tls-ca {args.tls_ca}: {getattr(exc, 'strerror', None) or exc}") from None
    if args.tls_cert or args.tls_key:
        try:
            context.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError, TypeError) as exc:
            raise ClientError(f"--tls-cert {args.tls_cert} / --tls-key {args.tls_key}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
    return context


def kafka_sasl_login(args: argparse.Namespace) -> SaslLogin | None:
    """The SASL login ``--sasl-*`` ask for (None without ``--sasl-mechanism``); ValueError when incomplete."""
    mechanism = getattr(args, "sasl_mechanism", None)
    if mechanism is None:
        return None
    if not args.sasl_username:
        raise ValueError("--sasl-mechanism needs --sasl-username")
    password = read_secret(args.sasl_password_file, SASL_PASSWORD_VARIABLE)
    if not password:
        raise ValueError(f"--sasl-mechanism needs a password: --sasl-password-file FILE or ${SASL_PASSWORD_VARIABLE}")
    from trikafka.kafka.sasl_client import SaslLogin

    return SaslLogin(SaslMechanism.parse(mechanism), args.sasl_username, password)


def validate_kafka(parser: argparse.ArgumentParser, args: argparse.Namespace, *, words: str | None = None) -> None:
    """Check ``--kafka``'s address.  With ``words`` (a list positional, as ``topics`` has), a value
    that is no address was a positional word ``--kafka`` took (``topics --kafka create NAME``):
    it goes back in front of that list and ``--kafka`` means the local listener."""
    from trikafka.client.addresses import parse_broker_addresses

    if getattr(args, "sasl_mechanism", None) is not None:
        if args.kafka is None:
            parser.error("--sasl-mechanism needs --kafka")
        try:
            kafka_sasl_login(args)
        except (ValueError, OSError) as exc:
            parser.error(str(exc))
    if not args.kafka:
        return
    if words is not None and ":" not in args.kafka:
        getattr(args, words).insert(0, args.kafka)
        args.kafka = LOCAL_KAFKA
        return
    try:
        parse_broker_addresses(args.kafka)
    except ValueError as exc:
        parser.error(f"--kafka: {exc}")


def kafka_bootstrap(args: argparse.Namespace) -> str:
    """The bootstrap address ``--kafka`` names (the local listener's when given without one)."""
    return args.kafka if args.kafka != LOCAL_KAFKA else default_kafka_bootstrap()


def resolve_broker(args: argparse.Namespace) -> None:
    """Fill an absent ``--broker`` (``args.broker_given`` says whether it was given)."""
    if hasattr(args, "broker"):
        args.broker_given = args.broker is not None
        if args.broker is None:
            args.broker = default_broker()


def add_zookeeper(p: argparse.ArgumentParser, help_text: str, *, default: bool = True) -> None:
    """The ``--zookeeper HOST:PORT[,...][/CHROOT]`` option; ``--zk`` is a hidden alias.

    With ``default``, an absent flag means :func:`default_zookeeper` (resolved when parsed).
    """
    where = "the local `trikafka serve`'s private ZooKeeper, else 127.0.0.1:2181"
    p.add_argument("--zookeeper", metavar="HOST:PORT[,...][/CHROOT]", default=None,
                   help=f"{help_text} (default: {where})" if default else help_text)
    p.add_argument("--zk", dest="zookeeper", help=argparse.SUPPRESS)
    if default:
        p.set_defaults(zookeeper_default=True)


def resolve_zookeeper(args: argparse.Namespace) -> None:
    """Fill an absent ``--zookeeper`` whose command has a default."""
    if getattr(args, "zookeeper", None) is None and getattr(args, "zookeeper_default", False):
        args.zookeeper = default_zookeeper()


async def read_lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[list[bytes]]:
    """Yield lists of complete lines (without the newline) as they arrive."""
    pending = b""
    while True:
        data = await stream.receive_some(READ_BYTES)
        if not data:
            break
        lines = (pending + data).split(b"\n")
        pending = lines.pop()
        if lines:
            yield lines
    if pending:
        yield [pending]


def split_keyed_lines(lines: list[bytes], separator: str) -> list[tuple[bytes, bytes | None]]:
    """``key<SEP>value`` lines as ``(key, value)``; ``key<SEP>`` alone is a tombstone (None).

    A line without the separator is a ``ValueError`` naming it.
    """
    sep = separator.encode()
    items: list[tuple[bytes, bytes | None]] = []
    for line in lines:
        key, found, value = line.partition(sep)
        if not found:
            raise ValueError(f"line without the key separator {separator!r}: {line[:60]!r}")
        items.append((key, value if value else None))
    return items


class Printer:
    """Every consumed message as ``--format`` renders it on stdout; counts them, and calls
    ``stop`` (and sets ``done``) at ``--max-messages``.  Flushed per message unless ``--no-flush``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._format = message_format(args)
        self._max_messages = args.max_messages
        self._flush = not args.no_flush
        self._out = sys.stdout.buffer
        self.count = 0
        self.stop: Callable[[], None] = lambda: None

    @property
    def done(self) -> bool:
        return self._max_messages is not None and self.count >= self._max_messages

    def write(self, message: Printed) -> None:
        if self.done:
            return
        self._out.write(self._format.render(message))
        self.count += 1
        if self._flush or self.count == self._max_messages:
            self._out.flush()
        if self.count == self._max_messages:
            self.stop()


def message_format(args: argparse.Namespace) -> MessageFormat:
    """The format ``--format`` or ``--print-key`` asks for, else one value per line."""
    if args.format is not None:
        return MessageFormat.parse(args.format)
    if args.print_key:
        return MessageFormat.parse("%k" + args.key_separator.replace("\\", "\\\\").replace("%", "%%") + "%s\\n")
    return MessageFormat.parse(DEFAULT_FORMAT)


def kafka_format_hint(topic: str) -> str:
    """What a 0.7 command says of a Kafka-format topic (docs/protocol.md §16.6), which only ``--kafka`` reads."""
    return f"{topic} is a Kafka-format topic: add --kafka"


def plural(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


async def run_until_signal(fn, *args, signals: tuple[int, ...]) -> tuple[object, int | None]:
    """``(await fn(*args), None)``, or ``(None, signum)`` when one of ``signals`` arrived first
    and cancelled ``fn`` cleanly."""
    result: object = None
    stopped_by: int | None = None
    with trio.open_signal_receiver(*signals) as received:
        async with trio.open_nursery() as nursery:
            async def watch() -> None:
                nonlocal stopped_by
                async for signum in received:
                    stopped_by = signum
                    nursery.cancel_scope.cancel()
                    return

            async def work() -> None:
                nonlocal result
                result = await fn(*args)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            nursery.start_soon(work)
    return result, stopped_by


async def stop_on_sigterm(fn, *args):
    """``await fn(*args)``, cancelled cleanly by SIGTERM (its result then None), as Ctrl-C stops it."""
    import signal

    result, _stopped_by = await run_until_signal(fn, *args, signals=(signal.SIGTERM,))
    return result


def run_client_value(fn: Callable[[ArgsT], Awaitable[ResultT]], args: ArgsT) -> ResultT | None:
    """``trio.run(fn, args)``; None (after a one-line error) if a broker or ZooKeeper failed."""
    from trikafka.client import ClientError
    from trikafka.zk import ZooKeeperClientError

    try:
        return trio.run(fn, args)
    except KeyboardInterrupt:
        return None
    except BrokenPipeError:
        raise  # a closed stdout: trikafka.cli.app.main's to handle
    except (ClientError, ZooKeeperClientError, OSError) as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return None


def run_client(fn, args: argparse.Namespace) -> int:
    """``trio.run(fn, args)`` as an exit status: an interrupt is a clean stop (and a closed stdout,
    ``trikafka.cli.app.main``'s to handle for every command)."""
    from trikafka.client import ClientError

    try:
        return trio.run(fn, args)
    except KeyboardInterrupt:
        return 0  # interrupting a consumer is how it is meant to stop
    except BrokenPipeError:
        raise
    except (ClientError, OSError) as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:  # the same, raised inside a nursery
        leaves = leaf_exceptions(group)
        if all(isinstance(e, KeyboardInterrupt) for e in leaves):
            return 0
        if all(isinstance(e, (KeyboardInterrupt, BrokenPipeError)) for e in leaves):
            raise
        if all(isinstance(e, (ClientError, OSError, KeyboardInterrupt)) for e in leaves):
            for message in dict.fromkeys(str(e) for e in leaves if not isinstance(e, KeyboardInterrupt)):
                print(f"trikafka: {message}", file=sys.stderr)
            return 1
        raise


def run_group_client(fn, args: argparse.Namespace) -> int:
    """Like ``run_client``, for commands that talk to ZooKeeper too."""
    from trikafka.group import ConsumerIdTakenOver, KafkaGroupClash, RebalanceFailedError
    from trikafka.zk import ZooKeeperClientError

    expected = (ZooKeeperClientError, RebalanceFailedError, ConsumerIdTakenOver, KafkaGroupClash)
    try:
        return run_client(fn, args)
    except expected as exc:
        print(f"trikafka: ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        leaves = leaf_exceptions(group)
        if all(isinstance(e, expected) for e in leaves):
            for leaf in leaves:
                print(f"trikafka: ZooKeeper at {args.zookeeper}: {leaf}", file=sys.stderr)
            return 1
        raise
