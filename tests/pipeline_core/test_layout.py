"""The core's layout stays true: one package per concept, imports only downward, no circles.

Read from the source (AST), so an import inside a function or under ``TYPE_CHECKING`` counts as
much as one at the top: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "pipeline_core"
ROOT_MODULES = {"__init__", "errors", "version"}

# What each package may import besides the root modules. Keep in step with the package docstrings.
ALLOWED: dict[str, set[str]] = {
    "memory": set(),
    "storage": set(),
    "formats": {"storage"},
    "tokenizer": {"storage", "formats", "memory"},
    "converters": set(),
    "chat": {"converters", "tokenizer", "formats"},
    "processors": {"chat", "tokenizer", "converters", "formats"},
    "packing": {"processors", "formats"},
    "sources": {"converters", "storage"},
    "commit": {"storage", "formats"},
    "stages": {
        "memory",
        "storage",
        "formats",
        "tokenizer",
        "converters",
        "chat",
        "processors",
        "packing",
        "sources",
        "commit",
    },
    "loader": {"storage", "formats", "commit"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (CORE.parent / rel).with_suffix(".py").exists() or (CORE.parent / rel / "__init__.py").exists()


def imports_of(path: Path) -> set[str]:
    """Every pipeline_core module this file imports, at any depth of its code."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "pipeline_core")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if base.split(".")[0] != "pipeline_core":
                continue
            for alias in node.names:  # `from pkg import submodule` depends on the submodule, not on pkg
                found.add(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base)
    return found


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(CORE.rglob("*.py"))}


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ROOT_MODULES:
        return None  # the root package or a root module
    return parts[1]


def test_no_module_at_the_root_but_init_errors_and_version():
    strays = sorted(p.stem for p in CORE.glob("*.py") if p.stem not in ROOT_MODULES)
    assert strays == [], f"modules at pipeline_core's root (move each into the package of its concept): {strays}"


def test_every_package_is_declared_and_documents_what_it_may_import():
    packages = {p.parent.name for p in CORE.glob("*/__init__.py")}
    assert packages == set(ALLOWED), "a package was added or removed: declare its imports in ALLOWED"
    for name in packages:
        doc = ast.get_docstring(ast.parse((CORE / name / "__init__.py").read_text()))
        assert doc and "May import" in doc, f"pipeline_core/{name}/__init__.py must say what it owns and may import"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_downward(package):
    wrong = set()
    for module, deps in graph().items():
        if package_of(module) != package:
            continue
        for dep in deps:
            target = package_of(dep)
            if dep == "pipeline_core":
                wrong.add(f"{module} -> pipeline_core (the root package: import the module itself)")
            elif target is not None and target != package and target not in ALLOWED[package]:
                wrong.add(f"{module} -> {dep}")
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package])}: " + "; ".join(sorted(wrong))


def test_no_import_circles():
    deps = graph()
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for dep in sorted(deps.get(module, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep in deps and dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(deps):
        if module not in state and (cycle := visit(module)):
            pytest.fail("import circle: " + " -> ".join(cycle))


def test_the_core_never_imports_orchestration():
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert name.split(".")[0] not in ("prefect", "prefect_dask", "tasks", "flows"), (
                    f"{path}: imports {name}"
                )


def test_the_checker_sees_a_circle(tmp_path, monkeypatch):
    # The circle check must be able to fail: a planted two-module circle is found.
    fake = tmp_path / "pipeline_core"
    (fake / "a").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "a" / "__init__.py").write_text('"""May import: nothing."""\n')
    (fake / "a" / "x.py").write_text("from pipeline_core.a.y import f\n")
    (fake / "a" / "y.py").write_text("def f():\n    from pipeline_core.a import x\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["CORE"]), "CORE", fake)
    with pytest.raises(pytest.fail.Exception, match="import circle"):
        test_no_import_circles()


def test_every_public_name_has_a_docstring_written_for_it():
    import inspect

    import pipeline_core

    inherited = {str.__doc__, dict.__doc__, object.__doc__}
    missing = []
    for name in pipeline_core.__all__:
        obj = getattr(pipeline_core, name)
        own = (
            obj.__dict__.get("__doc__")
            if inspect.isclass(obj)
            else type(obj).__doc__
            if not callable(obj)
            else obj.__doc__
        )
        generated = inspect.isclass(obj) and own and own.startswith(f"{obj.__name__}(")  # a dataclass's signature
        if not own or own in inherited or generated:
            missing.append(name)
    assert missing == [], f"give these a docstring of their own: {missing}"


def test_the_format_version_is_written_to_hdf5_as_plain_text(tmp_path):
    import h5py

    from pipeline_core.formats.h5 import encode_attr
    from pipeline_core.formats.h5_writer import H5Writer
    from pipeline_core.version import FORMAT_VERSION

    writer = H5Writer(str(tmp_path / "x.h5"))
    writer.file.attrs["copy"] = encode_attr(FORMAT_VERSION)
    writer.file.close()
    with h5py.File(tmp_path / "x.h5") as f:
        assert f.attrs["format_version"] == f.attrs["copy"] == str(FORMAT_VERSION)
