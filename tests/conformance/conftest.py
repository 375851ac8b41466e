"""The conformance fixtures are data read by ``test_conformance_*.py`` beside them, not
scenario files: kept out of collection (the harness's pytest plugin collects the JSON and
YAML under a directory named on the command line, as ``make test`` names ``tests``)."""

collect_ignore_glob = ["fixtures/*"]
