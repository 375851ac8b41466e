"""Root conftest: makes the repository root importable so tests can share helper modules
(``tests/runner_fault_server.py``) under any import mode. Fixtures live in tests/conftest.py."""
