"""The public API is what ``harness.__all__`` exports (sorted, every name resolves)."""

import harness


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert harness.__all__ == sorted(harness.__all__)
    for name in harness.__all__:
        value = getattr(harness, name)
        assert value is not None and not isinstance(value, type(harness)), name


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        harness.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
