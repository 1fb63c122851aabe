"""The ``trikafka`` command: ``serve``, ``produce``, ``consume``, ``topics``, ``groups``, ``mirror``, ``audit``,
``pipeline``.

``trikafka serve`` runs a broker registered in ZooKeeper (§11.2): with no
``--zookeeper`` it starts a private ZooKeeper child process (data next to the
log dir, stopped with the broker), so one command gives a one-broker cluster;
``--zookeeper host:port[,host:port][/chroot]`` joins an ensemble (more brokers
join the same way); ``--standalone`` runs without ZooKeeper.  When it is ready it prints
``trikafka: serving on HOST:PORT`` to stderr and, with ``--ready-file``,
writes the port to that file, so scripts can start it on port 0.

``produce`` sends each stdin line as one message, ``consume`` prints each
payload as one line; both talk to one broker (default 127.0.0.1:9092), except
``produce --zookeeper``, which finds brokers and partitions in ZooKeeper.
``consume --group G`` joins consumer group ``G`` through ZooKeeper (default
``127.0.0.1:2181``, where ``trikafka serve`` puts its private ZooKeeper), commits
as it goes and on SIGINT/SIGTERM; ``groups`` lists the groups, ``groups G``
shows members, owners, committed offsets, log ends and lag.
``topics`` lists what a log directory holds (``--log-dir``), the topics
registered in ZooKeeper (``--zk``), or named topics of one broker; each
partition's start, visible end and size come from OFFSETS.  The 0.7 protocol
has no metadata request, and trikafka adds none.

One module per command family, each registering its own subcommand
(``add_parser``); ``app`` builds the parser and runs ``main``; ``common`` holds
the defaults and runners the families share.
"""

from trikafka.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
