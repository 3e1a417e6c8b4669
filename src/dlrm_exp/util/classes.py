"""Class hierarchies: a class and every subclass of it imported so far."""

from collections.abc import Iterator


def with_subclasses(cls: type) -> Iterator[type]:
    """``cls``, then each of its subclasses and theirs, depth first (those imported so far:
    a subclass defined in a module not yet imported is not among them)."""
    yield cls
    for sub in cls.__subclasses__():
        yield from with_subclasses(sub)
