"""Root conftest: makes the repository root importable so tests can share helper modules
(``tests/sim_driver.py``, ``bench/``, ``e2e/``) under any import mode. Fixtures live in
tests/conftest.py."""
