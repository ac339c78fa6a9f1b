"""The message properties string: ``name \\x01 value \\x02 name \\x01 value``.

RocketMQ 4.9 writes it without a trailing ``\\x02``; older versions keep one. Both are read;
it is written without. As in RocketMQ's ``string2messageProperties``, an entry with an empty
name or empty value is skipped on read, so such entries are refused on write.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "decode_properties",
    "encode_properties",
    "validate_property",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def validate_property(name: str, value: str) -> None:
    """Raise ValueError unless ``name=value`` can be stored and read back unchanged."""
    if not isinstance(name, str) or not isinstance(value, str):
        raise ValueError(f"property {name!r}: names and values must be strings")
    if not name or not value:
        raise ValueError(f"property {name!r}: empty names and values cannot be stored")
    for text in (name, value):
        if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
            raise ValueError(f"property {name!r}: contains a reserved separator (\\x01 or \\x02)")


def encode_properties(props: Mapping[str, str | None]) -> str:
    """Join properties; entries whose value is None are skipped. Does not validate."""
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None)


def decode_properties(text: str) -> dict[str, str]:
    """Split a properties string as RocketMQ 4.9 does (trailing separator or not)."""
    result: dict[str, str] = {}
    if not text:
        return result
    for entry in text.split(PROPERTY_SEPARATOR):
        name, sep, value = entry.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            result[name] = value
    return result
