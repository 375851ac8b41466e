"""pytest plugin (registered via the ``pytest11`` entry point). Built in issue 8."""
