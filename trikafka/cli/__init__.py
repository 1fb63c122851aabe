"""The ``trikafka`` command: ``serve``, ``produce``, ``consume``, ``topics``, ``groups``, ``mirror``, ``audit``,
``pipeline``.

``trikafka serve`` runs a broker registered in ZooKeeper (§8.2): with no
``--zookeeper`` it starts a private ZooKeeper child process (data next to the
log dir, stopped with the broker), so one command gives a one-broker cluster;
``--zookeeper host:port[,host:port][/chroot]`` joins an ensemble (more brokers
join the same way); ``--standalone`` runs without ZooKeeper.  When it is ready it prints
``trikafka: serving on HOST:PORT (Kafka protocol on HOST:K)`` to stderr and, with
``--ready-file``, writes the port to that file's first line and ``kafka K`` to its second
(``trikafka.cli.serve.read_ready_file`` reads it), so scripts can start it on port 0.

``produce`` sends each stdin line as one message, ``consume`` prints each
payload as one line; both talk to one broker (default 127.0.0.1:9092), except
``produce --zookeeper``, which finds brokers and partitions in ZooKeeper.
Every command takes one address syntax, ``[ID:]HOST:PORT[,...]``
(``trikafka.client.parse_broker_addresses``), as ``--broker``/``--brokers``,
and ZooKeeper as ``--zookeeper``.  ``consume --group G`` joins consumer group
``G`` through ZooKeeper (default: the connect string a ``serve`` in this
directory wrote to ``./trikafka-data-zookeeper/zookeeper-connect``, else
``127.0.0.1:2181``), commits as it goes and on SIGINT/SIGTERM; ``groups``
lists the groups, ``groups G`` shows members, owners, committed offsets, log
ends and lag.  ``topics`` lists a broker's topics (METADATA, one line per
topic), the partitions of named topics, what a log directory holds
(``--log-dir``) or the topics registered in ZooKeeper (``--zookeeper``);
``topics create NAME --partitions N`` sends CREATE_TOPIC.  Errors are one
line on stderr and a non-zero exit.

One module per command family, each registering its own subcommand
(``add_parser``); ``app`` holds the table of commands (``COMMANDS``), builds the
parser with only the family of the command that runs (so ``trikafka --version``
imports neither Trio nor the broker) and runs ``main``; ``common`` holds the
defaults and runners the families share.
"""

from trikafka.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
