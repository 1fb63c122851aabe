"""Generic helpers any layer of trikafka may import: standard library only, no I/O.

``lazy`` loads a package's re-exported names on first use (PEP 562);
``settings`` parses setting values (booleans) the same way for every
configuration table.
"""
