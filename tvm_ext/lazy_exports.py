"""Lazy re-exports for package ``__init__`` files (PEP 562).

Heavy parts (anything importing TVM's Relax, torch, xgboost) load on first
attribute access, so importing a package stays cheap and import cycles
between the base layer and the packages above it cannot form.

>>> import types
>>> pkg = types.ModuleType("demo_pkg")
>>> pkg.__getattr__ = lazy_getattr("demo_pkg", {"sqrt": "math", "json": "json"}, vars(pkg))
>>> pkg.sqrt(9.0), pkg.json.__name__
(3.0, 'json')
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, MutableMapping

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, names: dict[str, str],
                 namespace: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving ``names`` (attribute -> defining module).

    A name equal to its module's last component resolves to the module itself;
    resolved values are cached in ``namespace`` (the package's ``globals()``).
    """

    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(target)
        value = module if target.rsplit(".", 1)[-1] == name else getattr(module, name)
        namespace[name] = value
        return value

    return __getattr__
