"""Test helpers shared by test modules: fixtures, fake worlds, process runners.

Test modules import helpers only from here, never from one another
(``tests/unit/test_import_rules.py`` checks it).
"""
