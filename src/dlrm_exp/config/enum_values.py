"""Settings of a fixed set of values (enums: ``mode``, ``sharding.sharding_type``,
``model.embedding_data_type``, ``qcomms.*_precision``, ...) given a value they do not take,
refused before Hydra composes: Hydra's own error ("Error merging override ... Invalid value
'row_wsie', expected one of [...]", with OmegaConf's ``full_key`` / ``reference_type`` lines)
suggested nothing, and for a per-table sharding type listed ``from_file``, which no table
takes.
"""

import functools
import typing
from collections.abc import Sequence
from enum import Enum
from typing import Any

from dlrm_exp.config.keys import override_values, parsed_overrides, schema_fields, schema_keys
from dlrm_exp.errors import ConfigError
from dlrm_exp.util.text import closest

#: Members of an enum that a field of it does not take (``sharding.per_table_sharding_type``'s
#: ``from_file``: a plan file places every table), left out of the values a refusal lists.
_NOT_LISTED = {"sharding.per_table_sharding_type": {"from_file"}}


def _enum_of(tp: Any) -> type[Enum] | None:
    """The enum ``tp`` is (or ``Optional`` of), else None."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
    enum = args[0] if len(args) == 1 else None
    return enum if isinstance(enum, type) and issubclass(enum, Enum) else None


@functools.cache
def enum_fields(root: type) -> dict[str, type[Enum]]:
    """``{full key: its enum}`` of the schema ``root``'s enum-typed fields (of every subclass
    of a field's dataclass: :func:`schema_fields`), and of its open maps of enum values (by
    the map's key: ``sharding.per_table_sharding_type``)."""
    found: dict[str, type[Enum]] = {}
    for key, tp in schema_fields(root).items():
        args = typing.get_args(tp)
        enum = _enum_of(args[1] if typing.get_origin(tp) is dict and len(args) == 2 else tp)
        if enum is not None:
            found[key] = enum
    return found


def _texts(override: Any) -> list[str]:
    """The text values an override gives (each of a sweep's; quotes stripped): a number, an
    interpolation or a function Hydra evaluates later gives none."""
    values = override_values(override) or []
    return [t for t in values if isinstance(t, str) and "${" not in t]


def check_enum_values(overrides: Sequence[str], root: type) -> None:
    """Each ``key=value`` override of an enum-typed setting of the schema ``root`` (an entry
    of a map of enum values too) names one of its values (OmegaConf also takes
    ``<Enum>.<value>``; numbers are left to it).

    Raises:
        ConfigError: naming the override, the values the key takes and the closest one.
    """
    fields = enum_fields(root)
    open_maps = schema_keys(root)[1]
    for text, override in parsed_overrides(overrides):
        key = override.key_or_group
        field = key if key in fields else key.rpartition(".")[0]
        if override.is_delete() or field not in fields or (field != key and field not in open_maps):
            continue
        enum = fields[field]
        listed = [m for m in enum.__members__ if m not in _NOT_LISTED.get(field, set())]
        for value in _texts(override):
            if value.removeprefix(f"{enum.__name__}.") in enum.__members__:
                continue  # (a value not listed is refused with its reason once composed)
            close = closest(value.lower(), listed, cutoff=0.5)
            hint = f": did you mean {close}?" if close else ""
            raise ConfigError(f"{text}: {key} takes {', '.join(listed)}, not {value}{hint}")
