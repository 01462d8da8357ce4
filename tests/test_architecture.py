"""The package's shape, checked from its source (ARCHITECTURE.md states the same rules).

- no import cycle between qkvcli's modules, counting imports inside functions and
  under ``TYPE_CHECKING`` (a cycle hidden in a function is still a cycle);
- one job per module: each module says its job in its docstring; every package face
  says what its folder does (size follows the job: no count of modules or lines is
  capped, style rule 8);
- one record per idea: no two records whose fields are mostly the same (synonyms: the
  same record under two names, whatever the names), no class name defined twice, and no
  package folder named like a top-level folder of the repository;
- no ``_private`` name imported from another module;
- each layer imports only the layers ARCHITECTURE.md allows it.

Each rule is one test that lists every offender, so one run shows them all.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "qkvcli"
REPOSITORY = PACKAGE.parent

# What each folder may import (besides itself): folders, or single modules of a folder
# ("attention.maths"). The top-level package and ``__main__`` are the public face and may
# name anything.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    # each stage of the data flow described once; its softmax terms are the engine's own
    "stages": {"core", "attention.maths"},
    # a fixture's gradcheck settings, by gradcheck's rules
    "reading": {"core", "gradcheck"},
    "gradcheck": {"core"},
    "attention": {"core", "reading", "gradcheck"},
    "learn": {"core", "reading", "check", "attention", "chapters"},
    "authoring": {"core", "reading", "gradcheck"},  # a starter's gradcheck section: the defaults
    "protocol": {"core", "reading"},  # an implementation's source is read by the one reader
    # attention: the reference head and layer
    "check": {"core", "reading", "gradcheck", "attention", "protocol"},
    # check and protocol: a chapter's plan runs check's families on its engine
    "chapters": {"core", "reading", "gradcheck", "attention", "check", "protocol"},
    "render": {"core", "reading", "gradcheck", "attention", "learn", "check",
               "chapters", "protocol", "stages"},
    "cli": {"core", "reading", "gradcheck", "attention", "learn", "authoring",
            "check", "render", "data", "chapters", "protocol", "stages"},
    "data": set(),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def resolve(importer: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = importer.split(".")
    if not MODULES[importer].name == "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(name: str) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every import in a module."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found: list[tuple[str, str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = resolve(name, node)
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                if submodule in MODULES:
                    found.append((submodule, "", node.lineno))
                else:
                    found.append((module, alias.name, node.lineno))
    return [item for item in found if item[0] == "qkvcli" or item[0].startswith("qkvcli.")]


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name in MODULES:
        targets = set()
        for module, _, _ in imports_of(name):
            while module not in MODULES and "." in module:
                module = module.rsplit(".", 1)[0]
            if module != name and module != "qkvcli":
                targets.add(module)
        edges[name] = targets
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target):], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycle() -> None:
    assert find_cycle(graph()) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def is_face(name: str) -> bool:
    return MODULES[name].name == "__init__.py" or name in {"qkvcli.__main__"}


def test_every_module_names_its_job() -> None:
    silent = [name for name in MODULES if name != "qkvcli.data"
              and len((ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8")))
                       or "").split()) < 4]
    assert silent == []


def test_every_package_face_says_what_its_folder_does() -> None:
    thin = [name for name in MODULES if MODULES[name].name == "__init__.py"
            and len((ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8")))
                     or "").split()) < 6]
    assert thin == []


SYNONYM_OVERLAP = 0.75
"""Two records sharing this share of their fields (of the union, at least three fields)
are one idea spelled twice: fold them, or say why they differ by a field that differs."""


def record_fields() -> dict[str, frozenset[str]]:
    """Every public class of qkvcli that declares fields, by ``module.Class``: its
    annotated class attributes (``ClassVar`` ones are not fields)."""
    found = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                fields = frozenset(
                    item.target.id for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and "ClassVar" not in ast.unparse(item.annotation))
                found[f"{name}.{node.name}"] = fields
    return found


def synonyms(records: dict[str, frozenset[str]]) -> list[tuple[str, str, list[str]]]:
    """The pairs of ``records`` (at least three fields each) sharing
    :data:`SYNONYM_OVERLAP` of their fields, and the fields they share."""
    sized = sorted((q, f) for q, f in records.items() if len(f) >= 3)
    return [(a, b, sorted(fa & fb)) for i, (a, fa) in enumerate(sized) for b, fb in sized[i + 1:]
            if len(fa & fb) / len(fa | fb) >= SYNONYM_OVERLAP]


def test_one_record_per_idea() -> None:
    records = record_fields()
    names: dict[str, list[str]] = {}
    for qualified in records:
        names.setdefault(qualified.rsplit(".", 1)[1], []).append(qualified)
    assert {cls: where for cls, where in names.items() if len(where) > 1} == {}
    assert synonyms(records) == []


def test_the_synonym_rule_finds_a_record_spelled_twice() -> None:
    """The rule can fail: two of the refusal records this round folded into one (each
    chapter had its own, under its own name) are found, whatever their names."""
    found = synonyms({
        "chapters.ch27.RefusedCase": frozenset({"case", "expected", "raised", "message"}),
        "chapters.ch29.RejectedRotaryInput": frozenset({"case", "expected", "raised",
                                                        "message", "facts"}),
        "core.results.FamilyCheck": frozenset({"name", "passed", "detail"}),
    })
    assert [(a, b) for a, b, _ in found] == [
        ("chapters.ch27.RefusedCase", "chapters.ch29.RejectedRotaryInput")]


def test_no_package_folder_is_named_like_a_repository_folder() -> None:
    top = {path.name for path in REPOSITORY.iterdir() if path.is_dir()}
    clashes = sorted(path.name for path in PACKAGE.rglob("*") if path.is_dir()
                     and (path / "__init__.py").exists() and path.name in top)
    assert clashes == []


def test_the_rules_tell_faces_from_modules() -> None:
    assert not is_face("qkvcli.core.projections") and is_face("qkvcli.core")


def test_no_private_name_crosses_modules() -> None:
    crossing = [
        f"{name}:{line} imports {module}.{imported}"
        for name in MODULES
        for module, imported, line in imports_of(name)
        if imported.startswith("_") and not imported.startswith("__") and module != name
    ]
    assert crossing == []


ENGINES_AND_JUDGEMENTS = ("qkvcli.core.projections", "qkvcli.core.results",
                          "qkvcli.core.invariants", "qkvcli.attention.engine",
                          "qkvcli.attention.head", "qkvcli.attention.multihead")
"""What builds or runs an engine, and the records of a judgement."""


def test_the_reader_builds_no_engine_and_judges_nothing() -> None:
    # A fixture is plain data: the engine is built where the evidence is computed
    # (check/chapter26.projections_of, attention/fixture.layer_of), `expect` judged there.
    found = [f"{name}:{line} imports {module}"
             for name in MODULES if name.startswith("qkvcli.reading.")
             for module, _, line in imports_of(name) if module in ENGINES_AND_JUDGEMENTS]
    assert found == []


def test_layers_import_only_what_they_may() -> None:
    wrong = []
    for name in MODULES:
        parts = name.split(".")
        if len(parts) < 3:  # qkvcli, qkvcli.__main__ and the layer packages' own __init__
            if len(parts) < 2 or parts[1] not in ALLOWED:
                continue
        layer = parts[1]
        for module, _, line in imports_of(name):
            target = module.split(".")
            if len(target) < 2 or target[1] == layer:
                continue
            if target[1] == "__version__" or (len(target) == 2 and target[1] not in ALLOWED):
                continue  # ``from qkvcli import __version__``
            if target[1] not in ALLOWED[layer] and ".".join(target[1:3]) not in ALLOWED[layer]:
                wrong.append(f"{name}:{line} imports {module}")
    assert wrong == []


PROCESS_CALLS = {"print", "exit", "quit", "input", "breakpoint", "sys.exit", "os._exit",
                 "os.abort", "os.kill", "os.dup2", "contextlib.redirect_stdout",
                 "contextlib.redirect_stderr", "redirect_stdout", "redirect_stderr"}
# Standard input is a file the one reader reads for "-" (reading/files.py), not the terminal.
PROCESS_NAMES = {"sys.argv", "sys.stdout", "sys.stderr"}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def test_nothing_below_cli_touches_the_process() -> None:
    """Only cli/ prints, exits, reads argv, writes the standard streams or rebinds them:
    the engine, the judge and the renderers are functions of their arguments."""
    offenders = []
    for name, path in MODULES.items():
        if name == "qkvcli.cli" or name.startswith("qkvcli.cli.") or name == "qkvcli.__main__":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _dotted(node.func) in PROCESS_CALLS:
                offenders.append(f"{name}:{node.lineno} calls {_dotted(node.func)}")
            elif isinstance(node, ast.Attribute) and _dotted(node) in PROCESS_NAMES:
                offenders.append(f"{name}:{node.lineno} uses {_dotted(node)}")
    assert offenders == []
