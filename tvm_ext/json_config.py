"""JSON round-tripping for configuration dataclasses (platforms, system graphs, tasks).

Configuration objects in the plugin are frozen dataclasses; mixing in
:class:`JsonConfig` gives them ``to_dict``/``to_json``/``from_dict``/
``from_json``/``replace`` with one behaviour everywhere: unknown keys and bad
JSON raise :class:`~tvm_ext.errors.ConfigError`, and ``replace`` re-runs the
class's validation.

Every JSON config text goes through :func:`parse_json` and every config file
through :func:`read_json_file`: Python's ``json`` accepts ``NaN``,
``Infinity`` and ``-Infinity`` (and turns ``1e999`` into ``inf``); these
refuse them, naming the key, as well as directories, non-regular files,
oversized files and nesting too deep to parse.

>>> parse_json('{"clock": {"ghz": Infinity}}', "cfg.json")
Traceback (most recent call last):
...
tvm_ext.errors.ConfigError: cfg.json: clock.ghz: non-finite number Infinity (JSON numbers must be finite)

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
import math
import os
import stat
from pathlib import Path
from typing import Any, TypeVar

from tvm_ext.errors import ConfigError

__all__ = ["JsonConfig", "parse_json", "read_json_file", "check_finite", "MAX_CONFIG_FILE_BYTES"]

T = TypeVar("T", bound="JsonConfig")

#: Largest config file :func:`read_json_file` reads (configs are hand-written, kilobytes).
MAX_CONFIG_FILE_BYTES = 16 << 20


class _NonFinite:
    """What ``NaN``/``Infinity``/``-Infinity`` parse to, so the key holding one can be named."""

    def __init__(self, text: str) -> None:
        self.text = text


def _key_path(path: tuple) -> str:
    out = ""
    for k in path:
        if isinstance(k, int):
            out += f"[{k}]"
        elif k.isidentifier():
            out += f".{k}" if out else k
        else:
            out += f"[{k!r}]"
    return out or "(top level)"


def check_finite(data: Any, what: str) -> None:
    """Raise :class:`ConfigError` naming the key of the first NaN/Inf number inside ``data``.

    >>> check_finite({"a": [1, 2.5]}, "cfg")
    >>> check_finite({"a": [1, float("nan")]}, "cfg")
    Traceback (most recent call last):
    ...
    tvm_ext.errors.ConfigError: cfg: a[1]: non-finite number nan (JSON numbers must be finite)
    """
    todo: list[tuple[Any, tuple]] = [(data, ())]
    while todo:
        value, path = todo.pop()
        if isinstance(value, _NonFinite) or (isinstance(value, float) and not math.isfinite(value)):
            text = value.text if isinstance(value, _NonFinite) else repr(value)
            raise ConfigError(f"{what}: {_key_path(path)}: non-finite number {text} (JSON numbers must be finite)")
        if isinstance(value, dict):
            todo.extend((v, path + (k,)) for k, v in reversed(list(value.items())))
        elif isinstance(value, (list, tuple)):
            todo.extend((v, path + (i,)) for i, v in reversed(list(enumerate(value))))


def parse_json(text: str | bytes, what: str) -> Any:
    """``json.loads`` for configs: invalid JSON, NaN/Infinity and runaway nesting raise :class:`ConfigError`.

    >>> parse_json('{"pes": 8}', "engine")
    {'pes': 8}
    """
    try:
        data = json.loads(text, parse_constant=_NonFinite)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{what}: invalid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise ConfigError(f"{what}: JSON nested too deeply") from None
    check_finite(data, what)
    return data


def read_json_file(path: str | os.PathLike, what: str | None = None) -> Any:
    """Parse a JSON config file; a missing, non-regular, oversized or invalid file raises :class:`ConfigError`.

    The error names the file (``what`` defaults to the path).
    """
    path = Path(path)
    what = what or str(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise ConfigError(f"{what}: cannot read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{what}: is a directory, not a JSON config file")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what}: not a regular file")
    if st.st_size > MAX_CONFIG_FILE_BYTES:
        raise ConfigError(f"{what}: {st.st_size:,} bytes is too large for a config file "
                          f"(limit {MAX_CONFIG_FILE_BYTES:,})")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{what}: cannot read ({e.strerror})") from None
    return parse_json(raw, what)


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
        unknown = sorted(set(data) - known, key=str)
        if unknown:
            raise ConfigError(f"{what}: unknown field(s) {unknown}; known: {sorted(known)}")
        check_finite(data, what)
        try:
            return cls(**data)
        except TypeError as e:  # a missing required field
            raise ConfigError(f"{what}: {e}") from None

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        """Inverse of :meth:`to_json`; invalid JSON or NaN/Infinity raises :class:`ConfigError`."""
        return cls.from_dict(parse_json(text, cls.__name__))

    @classmethod
    def from_file(cls: type[T], path: str | os.PathLike) -> T:
        """Read a JSON file (see :func:`read_json_file`); errors name the file."""
        data = read_json_file(path)
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
