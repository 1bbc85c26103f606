"""Checks of an adapter's list of framework internals (`adapter_*/<framework>_internals.py`), shared by the SkyRL
and verl suites: each listed framework internal still exists with the shape the adapter uses, and
the adapter's other modules touch no private framework symbol that list does not name."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

from arctic_rl_core.framework_internals import Internal


def resolve_owner(owner: str) -> object:
    module_name, _, qualname = owner.partition(":")
    target: object = importlib.import_module(module_name)
    for part in filter(None, qualname.split(".")):
        target = getattr(target, part)
    return target


def _string_constants(source: str) -> set[str]:
    return {
        n.value
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def _assigned_on_self(cls: type) -> set[str]:
    """Attribute names assigned as `self.<name>` (or declared) anywhere in the class's MRO sources,
    plus pydantic/dataclass fields."""
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(vars(klass).get("__annotations__", {}))
        names.update(getattr(klass, "model_fields", {}) or {})
        try:
            tree = ast.parse(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return names


def problem(entry: Internal) -> str | None:
    """None when `entry` still holds in the installed framework, else what changed."""
    try:
        owner = resolve_owner(entry.owner)
    except (ImportError, AttributeError) as error:
        return f"{entry.label}: owner {entry.owner} is gone ({type(error).__name__}: {error})"
    if entry.kind in ("override", "call"):
        try:
            member = inspect.getattr_static(owner, entry.name)
        except AttributeError:
            return f"{entry.label}: {entry.owner} has no {entry.name}"
        function = getattr(member, "__func__", member)
        if not callable(function):
            return f"{entry.label}: {entry.name} is not a method ({type(member).__name__})"
        # Ray adds `_ray_trace_ctx` to the methods of a class once it has made an actor of it
        # (in this process, by an earlier test): not the framework's signature
        params = tuple(p for p in inspect.signature(function).parameters if p != "_ray_trace_ctx")
        if entry.params and params != entry.params:
            return f"{entry.label}: parameters are {params}, the adapter relies on {entry.params}"
        return None
    if entry.kind == "class attribute":
        if entry.name not in vars(owner):
            return f"{entry.label}: {entry.owner} defines no class attribute {entry.name}"
        return None
    if entry.kind == "instance attribute":
        if not inspect.isclass(owner) or entry.name not in _assigned_on_self(owner):
            return f"{entry.label}: {entry.owner} no longer assigns or declares self.{entry.name}"
        return None
    if entry.kind == "module attribute":
        if not hasattr(owner, entry.name):
            return f"{entry.label}: {entry.owner} has no {entry.name}"
        return None
    if entry.kind == "key":
        if entry.name not in _string_constants(inspect.getsource(owner)):
            return f"{entry.label}: {entry.owner} no longer reads the key {entry.name!r}"
        return None
    return f"{entry.label}: unknown kind {entry.kind!r}"


def _framework_bases(cls: type, frameworks: tuple[str, ...]) -> list[type]:
    return [base for base in cls.__mro__[1:] if base.__module__.split(".")[0] in frameworks]


def unlisted_internals(
    package: str, internals_module: str, internals: tuple[Internal, ...], frameworks: tuple[str, ...]
) -> list[str]:
    """Private framework symbols the adapter's modules (other than the list's own) touch without the
    list naming them: overrides of / accesses to a framework base class's private members, and
    private attributes of other objects or modules that the adapter itself does not define."""
    listed = {(entry.owner, entry.name) for entry in internals}
    root = importlib.import_module(package)
    modules = [f"{package}.{info.name}" for info in pkgutil.iter_modules(root.__path__)]
    own_names: set[str] = set()
    trees = {}
    for name in modules:
        path = Path(importlib.util.find_spec(name).origin)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        trees[name] = tree
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own_names.add(node.name)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own_names.add(node.attr)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own_names.add(node.id)
    found: list[str] = []
    for name in modules:
        if name == internals_module:
            continue
        module = importlib.import_module(name)
        tree = trees[name]
        for node in ast.walk(tree):
            private_module = isinstance(node, ast.ImportFrom) and node.module and "._" in f".{node.module}"
            if private_module and node.module.split(".")[0] in frameworks:
                found.append(f"{name}:{node.lineno}: imports the private module {node.module}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "._private" in node.value:
                found.append(f"{name}:{node.lineno}: names the private module {node.value!r}")
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                base = node.value
                on_self = (isinstance(base, ast.Name) and base.id in ("self", "cls")) or (
                    isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"
                )
                if not on_self and node.attr not in own_names:
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
        for cls_node in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            cls = getattr(module, cls_node.name, None)
            if not inspect.isclass(cls):
                continue
            bases = _framework_bases(cls, frameworks)
            if not bases:
                continue
            touched = set()
            for node in ast.walk(cls_node):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    touched.add(node.name)
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name | ast.Call):
                    touched.add(node.attr)
            for attr in sorted(a for a in touched if a.startswith("_") and not a.startswith("__")):
                owners = [b for b in bases if attr in vars(b) or attr in _assigned_on_self(b)]
                for owner in owners:
                    key = (f"{owner.__module__}:{owner.__qualname__}", attr)
                    if key not in listed and not any(
                        e.name == attr and issubclass(owner, resolve_owner(e.owner))
                        for e in internals
                        if ":" in e.owner and inspect.isclass(resolve_owner(e.owner))
                    ):
                        found.append(f"{name}.{cls.__name__}.{attr}: private member of {key[0]}")
    return sorted(set(found))
