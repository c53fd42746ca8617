"""Type stubs of kernel libraries (tensorplug.stubs, `tensorplug stubgen`, cpp.build(stub=)):
the stub says what inspect.signature says, for every function and every signature kind, and
mypy --strict accepts right calls and refuses wrong ones."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tensorplug import _core, _signature, cpp, stubs

ROOT = Path(__file__).resolve().parents[2]
PARAM_KINDS = _core.VOCABULARY["param_kinds"]
RESULT_KINDS = _core.VOCABULARY["result_kinds"]


def run(*cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def mypy(directory: Path, *files: str) -> subprocess.CompletedProcess:
    """``python -m mypy --strict files`` in ``directory`` (its cache there too)."""
    pytest.importorskip("mypy", reason="mypy not installed (it is in the test extra)")
    return run(sys.executable, "-m", "mypy", "--strict", "--no-color-output", *files, cwd=directory)


def declared(stub: str) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in ast.parse(stub).body if isinstance(node, ast.FunctionDef)}


def assert_stub_matches_signature(node: ast.FunctionDef, sig: inspect.Signature) -> None:
    """The stub's declaration has the names, passing kinds, defaults and annotation strings of ``sig``."""
    args = node.args
    stub_params = [(a, inspect.Parameter.POSITIONAL_ONLY) for a in args.posonlyargs]
    stub_params += [(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in args.args]
    stub_params += [(args.vararg, inspect.Parameter.VAR_POSITIONAL)] if args.vararg else []
    assert not args.kwonlyargs and not args.kwarg
    defaults = [inspect.Parameter.empty] * (len(stub_params) - len(args.defaults))
    defaults += [ast.literal_eval(d) for d in args.defaults]
    params = list(sig.parameters.values())
    assert [(a.arg, kind) for a, kind in stub_params] == [(p.name, p.kind) for p in params], node.name
    assert [ast.unparse(a.annotation) for a, _ in stub_params] == [p.annotation for p in params], node.name
    assert defaults == [p.default for p in params], node.name
    assert [type(d) for d in defaults] == [type(p.default) for p in params], node.name
    assert ast.unparse(node.returns) == sig.return_annotation, node.name


@pytest.mark.parametrize("library", ["example", "args"])
def test_stub_declares_every_function_as_inspect_signature_shows_it(library, kernels, args_kernels):
    module = kernels if library == "example" else args_kernels
    stub = stubs.stub_text(module)
    functions = declared(stub)
    assert sorted(functions) == sorted(module.functions)
    for name, node in functions.items():
        assert_stub_matches_signature(node, inspect.signature(module[name]))
        assert [ast.unparse(s) for s in node.body] == ["..."]


def test_stub_text_of_the_argument_kinds_library(args_kernels):
    stub = stubs.stub_text(args_kernels)
    assert stub.startswith('"""Type stubs of the kernel library args_kernels.so (made by tensorplug stubgen)."""\n\n'
                           "from typing import Optional, Sequence\nfrom tensorplug.typing import Tensor\n\n")
    lines = stub.splitlines()
    assert ("def affine(x: float, alpha: float = 1.0, shift: int = 0, negate: bool = False, mode: str = 'plain') "
            "-> float: ...") in lines
    assert "def count_or(x: Optional[Tensor] = None, fallback: int = -1) -> int: ..." in lines
    assert "def sum_into(xs: Sequence[Tensor], out: Tensor) -> None: ..." in lines
    assert "def len_or(v: Optional[Sequence[int]]) -> int: ..." in lines
    assert "def reversed_ints(v: Sequence[int]) -> list[int]: ..." in lines
    assert "def range(like: Tensor, n: int) -> list[Tensor]: ..." in lines


def all_kinds_signatures() -> dict[str, inspect.Signature]:
    """One function per parameter kind (plain and optional, with a default) and per result kind."""
    signatures = {}
    for kind in PARAM_KINDS:
        signatures[f"takes_{kind}"] = _signature.build(f"takes_{kind}", f"x:{kind};y:?{kind}=None->void")
    for kind in RESULT_KINDS:
        signatures[f"gives_{kind}"] = _signature.build(f"gives_{kind}", f"->{kind}")
    return signatures


@pytest.mark.parametrize("kind", sorted(set(PARAM_KINDS) | set(RESULT_KINDS)))
def test_every_signature_kind_has_a_stub_type(kind):
    # A kind added to vocabulary.h without an entry in _signature's table is typed Any: this fails.
    annotations = []
    if kind in PARAM_KINDS:
        annotations.append(_signature.param_annotation(kind))
        assert _signature.param_annotation(f"?{kind}") in (f"Optional[{annotations[0]}]", "Any")
    if kind in RESULT_KINDS:
        annotations.append(_signature.result_annotation(kind))
    for annotation in annotations:
        assert annotation != _signature.UNKNOWN or kind == "any", f"kind '{kind}' has no Python type"
        names = set(ast.walk(ast.parse(annotation, mode="eval")))
        for node in names:
            if isinstance(node, ast.Name):
                assert node.id in stubs._BUILTINS or node.id in _signature.STUB_IMPORTS, (kind, node.id)


def test_unknown_kinds_are_any():
    sig = _signature.build("f", "x:nosuchkind;y:?nosuchkind->nosuchresult")
    assert str(sig) == "(x: 'Any', y: 'Any') -> 'Any'"
    assert "def f(x: Any, y: Any) -> Any: ..." in stubs.render("f", {"f": sig}).splitlines()


def test_stub_of_every_kind_passes_mypy_strict(tmp_path):
    signatures = all_kinds_signatures()
    stub = stubs.render("every signature kind", signatures)
    for name, node in declared(stub).items():
        assert_stub_matches_signature(node, signatures[name])
    (tmp_path / "kinds.pyi").write_text(stub)
    (tmp_path / "use_kinds.py").write_text("import kinds\n\nkinds.takes_int(1)\nn: int = kinds.gives_int()\n")
    proc = mypy(tmp_path, "use_kinds.py", "kinds.pyi")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "Success: no issues found in 2 source files"


def test_defaults_a_literal_cannot_show_are_ellipsis():
    sig = _signature.build("f", "a:float=inf;b:float=nan;c:float=-2.5;d:str='x y'")
    assert "def f(a: float = ..., b: float = ..., c: float = -2.5, d: str = 'x y') -> Any: ..." in (
        stubs.render("f", {"f": sig}).splitlines())


def test_functions_without_a_signature_take_any_arguments():
    sig = _signature.build("f", None)
    assert str(sig) == "(*args: 'Any') -> 'Any'"
    stub = stubs.render("f", {"f": sig})
    assert "def f(*args: Any) -> Any: ..." in stub.splitlines()
    assert_stub_matches_signature(declared(stub)["f"], sig)


NAMES_SOURCE = r"""
int64_t Keep(int64_t a, int64_t b) { return a + b; }
std::string Echo(std::string x) { return x; }
TENSORPLUG_EXPORT(plus, Keep, "from", "b");
TENSORPLUG_EXPORT(str, Echo, "x");
TENSORPLUG_EXPORT(lambda, Echo, "x");
"""


def test_names_python_refuses(tmp_path):
    m = cpp.load_inline("stub_names", NAMES_SOURCE)
    # A keyword parameter name is shown renamed and positional-only (a position is the only way to pass it).
    assert str(inspect.signature(m.plus)) == "(from_: 'int', /, b: 'int') -> 'int'"
    assert m.plus(1, b=2) == 3
    stub = stubs.stub_text(m)
    assert stub == textwrap.dedent('''\
        """Type stubs of the kernel library stub_names.so (made by tensorplug stubgen)."""

        from builtins import str as _str

        # Not declared (no Python identifier; call them as module[name]): lambda

        def plus(from_: int, /, b: int) -> int: ...
        def str(x: _str) -> _str: ...
        ''')
    (tmp_path / "names.pyi").write_text(stub)
    (tmp_path / "use_names.py").write_text("import names\n\ns: str = names.str('a')\nn: int = names.plus(1, b=2)\n")
    proc = mypy(tmp_path, "use_names.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


# A script calling the example library and the argument-kinds library with numpy, as a user writes it.
GOOD_SAMPLE = """\
import numpy as np

import args_kernels
import example_kernels

x = np.arange(6, dtype=np.float32)
y = np.zeros(6, dtype=np.float32)
example_kernels.scale(x, y, 2.0)
doubled = example_kernels.add(x, y)
total: float = example_kernels.sum(doubled)
n: int = example_kernels.numel(x)
copy, twice = example_kernels.split(x)
count: int = args_kernels.count_or()
scaled: float = args_kernels.affine(2.0, mode="twice")
shape: list[int] = args_kernels.reversed_ints((2, 3))
shape.append(args_kernels.total_numel([x, y]))
print(total, n, len(copy) + len(twice), count, scaled, shape)
"""

BAD_SAMPLE = """\
import numpy as np

import args_kernels
import example_kernels

x = np.arange(6, dtype=np.float32)
example_kernels.scale(x, x, "2")
args_kernels.affine(2.0, scale=3.0)
name: str = args_kernels.echo_int(3)
"""

MODULE = """\
import tensorplug

_library = tensorplug.load_module({path!r})
globals().update({{name: _library[name] for name in _library.functions}})
"""


@pytest.fixture(scope="module")
def typed_modules(tmp_path_factory, kernels, args_kernels):
    """A directory with modules example_kernels and args_kernels (a .py loading the library, and its
    stub written by the command line)."""
    directory = tmp_path_factory.mktemp("typed")
    for name, module in (("example_kernels", kernels), ("args_kernels", args_kernels)):
        (directory / f"{name}.py").write_text(MODULE.format(path=module.path))
        proc = run(sys.executable, "-m", "tensorplug", "stubgen", module.path, "-o", f"{name}.pyi", cwd=directory)
        assert proc.returncode == 0 and proc.stdout == proc.stderr == "", proc.stderr
        assert (directory / f"{name}.pyi").read_text() == stubs.stub_text(module)
    return directory


def test_mypy_strict_accepts_a_script_calling_the_libraries(typed_modules):
    (typed_modules / "good.py").write_text(GOOD_SAMPLE)
    proc = mypy(typed_modules, "good.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "Success: no issues found in 1 source file"
    # ... and the script it accepted runs.
    proc = run(sys.executable, "good.py", cwd=typed_modules)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["45.0", "6", "12", "-1", "4.0", "[3,", "2,", "12]"]


def test_mypy_strict_refuses_wrong_calls(typed_modules):
    (typed_modules / "bad.py").write_text(BAD_SAMPLE)
    proc = mypy(typed_modules, "bad.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if ": error: " in line]
    assert errors == [
        'bad.py:7: error: Argument 3 to "scale" has incompatible type "str"; expected "float"  [arg-type]',
        'bad.py:8: error: Unexpected keyword argument "scale" for "affine"  [call-arg]',
        'bad.py:9: error: Incompatible types in assignment (expression has type "int", variable has type "str")'
        "  [assignment]",
    ], proc.stdout


def test_cli_writes_to_stdout_and_refuses_what_is_no_kernel_library(tmp_path, kernels):
    proc = run(sys.executable, "-m", "tensorplug", "stubgen", kernels.path, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == stubs.stub_text(kernels)
    proc = run(sys.executable, "-m", "tensorplug", "stubgen", str(tmp_path / "nope.so"), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"tensorplug stubgen: no such file: {tmp_path / 'nope.so'}\n"
    (tmp_path / "text.so").write_text("not a library")
    proc = run(sys.executable, "-m", "tensorplug", "stubgen", "text.so", "-o", "text.pyi", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("tensorplug stubgen: ") and "text.so" in proc.stderr
    assert not (tmp_path / "text.pyi").exists()


def test_cpp_build_writes_the_stub(tmp_path, kernels):
    stub = tmp_path / "pkg" / "__init__.pyi"
    path = cpp.build("example_kernels", [ROOT / "examples" / "kernels" / "kernels.cc"], stub=stub)
    assert path == kernels.path and stub.read_text() == stubs.stub_text(kernels)
    # Unchanged text is not rewritten (build systems watch the file's time).
    os.utime(stub, (1, 1))
    cpp.build("example_kernels", [ROOT / "examples" / "kernels" / "kernels.cc"], stub=stub)
    assert stub.stat().st_mtime == 1
    stub.write_text("stale")
    cpp.build("example_kernels", [ROOT / "examples" / "kernels" / "kernels.cc"], stub=stub)
    assert stub.read_text() == stubs.stub_text(kernels)
