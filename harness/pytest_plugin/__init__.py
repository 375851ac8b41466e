"""The pytest plugin: scenario files as test items against a live server."""
