"""JSON round-tripping for configuration dataclasses (platforms, system graphs, tasks).

Configuration objects in the plugin are frozen dataclasses; mixing in
:class:`JsonConfig` gives them ``to_dict``/``to_json``/``from_dict``/
``from_json``/``replace`` with one behaviour everywhere: unknown keys and bad
JSON raise :class:`~tvm_ext.errors.ConfigError`, and ``replace`` re-runs the
class's validation.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Clock(JsonConfig):
...     mhz: float = 100.0
>>> Clock.from_json(Clock(250.0).to_json())
Clock(mhz=250.0)
>>> Clock.from_dict({"ghz": 1})
Traceback (most recent call last):
...
tvm_ext.errors.ConfigError: Clock: unknown field(s) ['ghz']; known: ['mhz']
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

from tvm_ext.errors import ConfigError

__all__ = ["JsonConfig"]

T = TypeVar("T", bound="JsonConfig")


class JsonConfig:
    """Mixin for frozen dataclasses that round-trip through JSON."""

    def replace(self: T, **changes: Any) -> T:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (nested dataclasses become dicts)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """JSON text that :meth:`from_json` reads back."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        """Build from a dict; unknown keys raise :class:`ConfigError`."""
        what = cls.__name__
        if not isinstance(data, dict):
            raise ConfigError(f"{what}: expected a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{what}: unknown field(s) {unknown}; known: {sorted(known)}")
        try:
            return cls(**data)
        except TypeError as e:  # a missing required field
            raise ConfigError(f"{what}: {e}") from None

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        """Inverse of :meth:`to_json`; invalid JSON raises :class:`ConfigError`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{cls.__name__}: invalid JSON ({e})") from None
        return cls.from_dict(data)
