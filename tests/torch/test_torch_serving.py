"""tensorplug ops in a C++ process without Python (issue 44): an AOTInductor package whose
model calls an allocating and a destination-passing tensorplug op runs in a C++ runner
(tests/support/torch_serving_runner.cc) built against the installed libtorch, with the ops
registered by the registration library (plugins/tensorplug_adapters/torch/serving.cc);
bad deployments fail with a c10::Error naming the op and the library, no crash.

The builds are slow on a small machine (the package about 60 s, the runner about 40 s, the
registration library about 40 s once per torch version, then cached): each is made once per
test session by the module fixtures.
"""

import os
import shutil
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import torch_serving_package  # noqa: E402  (tests/support/torch_serving_package.py)

import tensorplug  # noqa: E402
from tensorplug import cpp, plans  # noqa: E402
from tensorplug_adapters.torch import aoti as torch_aoti, serving as torch_serving  # noqa: E402

SUPPORT = Path(__file__).parents[1] / "support"
ROOT = Path(__file__).parents[2]
RUNNER = SUPPORT / "torch_serving_runner.cc"
ADD_ONE = ROOT / "examples" / "c_kernel" / "add_one.c"



def _need_compiler():
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler ($CXX or c++): the registration library and the runner are compiled against "
                    "libtorch")


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """The C++ runner, linked against libtorch and the registration library (no libpython)."""
    _need_compiler()
    library = torch_serving.build(torch)
    root = os.path.dirname(torch.__file__)
    out = tmp_path_factory.mktemp("runner") / "torch_serving_runner"
    cmd = [os.environ.get("CXX", "c++"), "-std=c++17", "-O0", *_torch_flags(), str(RUNNER), "-o", str(out), library, f"-L{os.path.join(root, 'lib')}", "-ltorch", "-ltorch_cpu", "-lc10",
           f"-Wl,-rpath,{os.path.join(root, 'lib')}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def _torch_flags():
    root = os.path.dirname(torch.__file__)
    return ["-isystem", os.path.join(root, "include"), "-isystem",
            os.path.join(root, "include", "torch", "csrc", "api", "include"),
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}", f"-I{torch_serving.include_dir()}"]


def test_the_documented_program_compiles(tmp_path):
    # docs/compilers.md's C++ server (not built by tests/docs/test_docs.py, which builds kernel
    # libraries): checked against torch's and the registration library's headers.
    _need_compiler()
    text = (ROOT / "docs" / "compilers.md").read_text()
    start = text.index("```cpp\n// serve.cc")
    code = text[start + len("```cpp\n"):text.index("```", start + 6)]
    source = tmp_path / "serve.cc"
    source.write_text(code)
    done = subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-fsyntax-only", "-Wall", "-Werror",
                           *_torch_flags(), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _run(runner, *args):
    # A bare environment: nothing of this Python process (PYTHONPATH) reaches it. Only the
    # sanitizer run's preloads (tests/sanitize/run.sh) pass: its libtensorplug is instrumented
    # and needs the ASan runtime loaded first, as in every process of that run.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for name in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS"):
        if name in os.environ:
            env[name] = os.environ[name]
    done = subprocess.run([str(runner), *map(str, args)], capture_output=True, text=True, timeout=300, env=env)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """A package calling three tensorplug ops (one writing its argument), with and without
    the record, and the eager model's values (tests/support/torch_serving_package.py)."""
    return torch_serving_package.make(tmp_path_factory.mktemp("package"))


def _values(text, output=0):
    lines = [line for line in text.splitlines() if line.startswith("values ")]
    return [float(v) for v in lines[output].split()[1:]]


def test_the_runner_links_no_libpython(runner):
    for binary in (runner, torch_serving.build(torch)):
        linked = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
        assert "libpython" not in linked and "libtorch_cpu" in linked, linked


def test_a_cpp_process_without_python_runs_the_package(runner, package):
    rc, out = _run(runner, "run", package.path)
    assert rc == 0, out
    assert "registered 4" in out
    assert _values(out) == package.expected  # [7.0, 25.0]: the eager model's values, exactly
    # strict_cube raises on a non-compact x: the registration library passed a compact copy of x.t()
    assert _values(out, 1) == package.cube
    assert "libpython: none" in out  # /proc/self/maps, read by the runner before and after


def test_a_package_made_on_the_stable_kernels_is_served_the_same_way(runner, tmp_path):
    # TENSORPLUG_TORCH_BRIDGE=0: the exporting process's ops take the stable kernels (the
    # stable shim's native kernel; strict_cube, contiguous=, the Python one), not the compiled
    # bridge. The bridge is chosen once per process, so a fresh Python makes the package; the
    # C++ process registers the record's ops as for the default's package.
    done = subprocess.run([sys.executable, str(SUPPORT / "torch_serving_package.py"), str(tmp_path)],
                          capture_output=True, text=True, cwd=SUPPORT, timeout=600,
                          env={**os.environ, "TENSORPLUG_TORCH_BRIDGE": "0"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    made = json.loads(done.stdout.splitlines()[-1])
    assert made["bridge_attached"] is False
    assert made["kernels"] == {
        "tpserve::scale": "stable", "tpserve::axpy": "stable", "tpserve::row_sum": "stable",
        "tpserve::strict_cube": "python: it declares contiguous=('x',), and the native kernel cannot make compact "
                                "copies"}
    rc, out = _run(runner, "run", made["path"])
    assert rc == 0 and "registered 4" in out, out
    assert _values(out) == made["expected"] and _values(out, 1) == made["cube"], out  # the eager values, exactly
    assert "libpython: none" in out


def test_without_the_registration_library_torch_finds_no_op(runner, package):
    # The bare package (no record): the runner registers nothing and torch's loader refuses.
    rc, out = _run(runner, "run", package.bare)
    assert rc == 3 and "registered 0" in out and "tpserve::scale" in out, out


def test_kernel_libraries_are_found_in_a_deployment_folder(runner, package, tmp_path):
    # Shipped elsewhere: the record's absolute paths give way to library_dir (by file name).
    for library in (package.module.path, package.strict.path):
        shutil.copy(library, tmp_path / os.path.basename(library))
    rc, out = _run(runner, "run", package.path, tmp_path)
    assert rc == 0 and _values(out) == package.expected, out


def test_native_libraries_lists_what_a_deployment_ships(package):
    _need_compiler()
    assert torch_aoti.native_libraries(package.path, torch=torch) == [
        os.path.join(cpp.lib_dir(), "libtensorplug.so"), torch_serving.build(torch), package.module.path,
        package.strict.path]


def _bad_package(package, tmp_path, change):
    """The bare package with the record of ``package`` changed by ``change(entries)``."""
    entries = torch_aoti.records(package.path)
    change(entries)
    path = str(tmp_path / "bad.pt2")
    shutil.copy(package.bare, path)
    torch_aoti.write_record(path, entries)
    return path


def _library_for_abi(tmp_path, abi):
    """add_one.c compiled against tensorplug headers whose ABI version is ``abi``."""
    include = tmp_path / f"include{abi}"
    shutil.copytree(cpp.include_dir(), include)
    header = include / "tensorplug" / "c_api.h"
    header.write_text(header.read_text().replace("#define TENSORPLUG_ABI_VERSION 1\n",
                                                 f"#define TENSORPLUG_ABI_VERSION {abi}\n"))
    out = tmp_path / f"libadd_one_abi{abi}.so"
    subprocess.run(["cc", "-std=c11", "-shared", "-fPIC", f"-I{include}", str(ADD_ONE), "-o", str(out),
                    f"-L{cpp.lib_dir()}", "-ltensorplug", f"-Wl,-rpath,{cpp.lib_dir()}"], check=True)
    return str(out)


def _set(name, **fields):
    def change(entries):
        for entry in entries:
            if entry["name"] == name:
                entry.update(fields)
    return change


@pytest.mark.parametrize("case", ["missing library", "function gone", "another ABI"])
def test_a_bad_deployment_fails_with_a_c10_error_naming_the_op_and_library(runner, package, tmp_path, case):
    if case == "missing library":
        library = str(tmp_path / "nowhere" / "op_kernels.so")
        expected = f"op 'tpserve::scale': kernel library '{library}' could not be loaded: "
    elif case == "function gone":
        library = _library_for_abi(tmp_path, 1)  # a library exporting add_one only
        expected = (f"op 'tpserve::scale': kernel library '{library}' has no function 'scale' (the record names it; "
                    "was the library rebuilt without it?)")
    else:
        library = _library_for_abi(tmp_path, 2)
        expected = (f"op 'tpserve::scale': kernel library '{library}' could not be loaded: ValueError: kernel "
                    f"library '{library}' was built for tensorplug ABI 2, this runtime is ABI 1")
    rc, out = _run(runner, "register", _bad_package(package, tmp_path, _set("tpserve::scale", library=library)))
    assert rc == 3, out  # the runner caught the c10::Error: no crash
    assert out.startswith("c10::Error: " + expected), out


def test_a_function_whose_signature_is_not_the_recorded_one_is_refused(runner, package, tmp_path):
    # The record says scale's alpha is an int; the library's scale takes a float.
    def change(entries):
        next(e for e in entries if e["name"] == "tpserve::scale")["params"][1]["kind"] = "int"
    rc, out = _run(runner, "register", _bad_package(package, tmp_path, change))
    assert rc == 3, out
    assert out.startswith(f"c10::Error: op 'tpserve::scale': function 'scale' of kernel library "
                          f"'{package.module.path}' has the signature 'x:view;alpha:float;bias:?view->tensor', which "
                          "is not the one the record holds; export the package again with this library"), out


def _outputs(params, rule):
    """``rule`` (a tensorplug.Output over the parameters of ``params``, a signature string)
    in the record's form: its one compiled form, tensorplug.plans.compile_outputs's."""
    from tensorplug.ops import parse_signature

    declared, _ = parse_signature(params)
    op = SimpleNamespace(n_outputs=1, returns=rule, params=declared)
    return json.loads(json.dumps(plans.compile_outputs(op)))


def _set_rule(name, params, rule):
    def change(entries):
        entry = next(e for e in entries if e["name"] == name)
        entry["outputs"] = _outputs(params, rule)
    return change


def test_a_result_against_the_output_rule_is_checked_in_the_cpp_process(runner, package, tmp_path):
    # The record says row_sum returns x.shape[0] + 1 items; the kernel returns x.shape[0].
    change = _set_rule("tpserve::row_sum", "x:view->tensor",
                       tensorplug.Output(shape=("x.shape[0] + 1",), dtype="x"))
    rc, out = _run(runner, "run", _bad_package(package, tmp_path, change))
    # A call's error crosses AOTInductor's C shim, whose runner rethrows it as std::runtime_error.
    assert rc == 3 and "std::exception: " in out, out
    assert ("op 'tpserve::row_sum' returned float32[2] on cpu:0 as result 0, but its output rule declares "
            "float32[3] on cpu:0") in out, out


def test_the_record_holds_the_output_rule_s_one_compiled_form(package):
    # What the C++ process hands TPPlanCreate is what the Python process's plan holds.
    declared = {op.name: op for op in map(tensorplug.get_op, ["tpserve::scale", "tpserve::axpy",
                                                               "tpserve::row_sum", "tpserve::strict_cube"])}
    for entry in torch_aoti.records(package.path):
        op = declared[entry["name"]]
        assert entry["outputs"] == json.loads(json.dumps(plans.compile_outputs(op))), entry["name"]
        assert entry["n_outputs"] == op.n_outputs
        assert [p["code"] for p in entry["params"]] == [plans.PARAM_KINDS[p.kind] for p in op.params]


def test_the_cpp_process_evaluates_a_rule_as_python_does(runner, package, tmp_path):
    # Floor division and modulo of negative numbers, negative indices: x is 2x3, so the
    # expression is (-3) // 2 + 3 % -2 + x.shape[-2] * 2 + 1 = -2 - 1 + 4 + 1 = 2 in Python's
    # arithmetic (C's truncation would give 5), the length of row_sum's result.
    expression = "(-x.shape[1]) // 2 + x.shape[1] % -2 + x.shape[-2] * 2 + 1"
    rule = tensorplug.Output(shape=(expression,), dtype="x")
    change = _set_rule("tpserve::row_sum", "x:view->tensor", rule)
    rc, out = _run(runner, "run", _bad_package(package, tmp_path, change))
    assert rc == 0 and _values(out) == package.expected, out


class _ListModel(torch.nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.ops = ops

    def forward(self, x):
        # Output(shape="shape"): an int list; Output(shape=("len(xs)", "xs[0].shape[0]")): a tensor list.
        return self.ops.filled(x, [2, 2], 1.0), self.ops.stack_scaled([x[0], x[1]], [1, 2])


LIST_SOURCE = SUPPORT / "op_list_kernels.cc"


@pytest.fixture(scope="module")
def list_package(tmp_path_factory):
    """A package calling ops whose rules read an int list and a tensor list (rules the
    record's earlier form left unchecked), with the eager model's values."""
    module = tensorplug.load_module(cpp.build("op_list_kernels", [LIST_SOURCE]))
    ops = SimpleNamespace(
        filled=tensorplug.op("tpserve::filled", module.filled, returns=tensorplug.Output(shape="shape", dtype="x")),
        stack_scaled=tensorplug.op("tpserve::stack_scaled", module.stack_scaled,
                                   returns=tensorplug.Output(shape=("len(xs)", "xs[0].shape[0]"), dtype="xs")),
    )
    model, x = _ListModel(ops), torch.arange(6, dtype=torch.float32).reshape(2, 3)
    root = tmp_path_factory.mktemp("list_package")
    bare = str(root / "bare.pt2")
    torch._inductor.aoti_compile_and_package(torch.export.export(model, (x,)), package_path=bare)
    path = str(root / "model.pt2")
    shutil.copy(bare, path)
    torch_aoti.add_ops(path, module, [ops.filled, ops.stack_scaled])
    filled, stacked = model(x)
    return SimpleNamespace(path=path, bare=bare, expected=[filled.flatten().tolist(), stacked.flatten().tolist()])


def test_a_cpp_process_runs_ops_taking_int_lists_and_tensor_lists(runner, list_package):
    rc, out = _run(runner, "run", list_package.path)
    assert rc == 0 and "registered 2" in out, out
    assert [_values(out, 0), _values(out, 1)] == list_package.expected  # [16.0] * 4, [0, 1, 2, 6, 8, 10]


@pytest.mark.parametrize("name, params, rule, returned, declared", [
    ("tpserve::filled", "x:view;shape:ints;value:float->tensor",
     tensorplug.Output(shape=("shape[0]", "shape[1] + 1"), dtype="x"), "float32[2, 2]", "float32[2, 3]"),
    ("tpserve::stack_scaled", "xs:views;scales:ints->tensor",
     tensorplug.Output(shape=("len(xs) + 1", "xs[0].shape[0]"), dtype="xs"), "float32[2, 3]", "float32[3, 3]"),
])
def test_an_output_rule_reading_lists_is_checked_in_the_cpp_process(runner, list_package, tmp_path, name, params,
                                                                     rule, returned, declared):
    # The record's earlier form had no program for int lists and tensor lists, and left
    # these rules unchecked; the plan checks every kind.
    rc, out = _run(runner, "run", _bad_package(list_package, tmp_path, _set_rule(name, params, rule)))
    assert rc == 3 and "std::exception: " in out, out
    assert (f"op '{name}' returned {returned} on cpu:0 as result 0, but its output rule declares {declared} on "
            "cpu:0") in out, out


def test_the_package_hands_the_kernel_a_strided_tensor_the_copy_makes_compact(runner, package, tmp_path):
    # Without the record's contiguous mark, strict_cube gets x.t() as the package passes it
    # (strided) and refuses it, naming the op: the compact copy above is the registration
    # library's, not the package's.
    def change(entries):
        next(e for e in entries if e["name"] == "tpserve::strict_cube")["params"][0]["contiguous"] = False
    rc, out = _run(runner, "run", _bad_package(package, tmp_path, change))
    assert rc == 3, out
    assert "tpserve::strict_cube(): ValueError: strict_cube: x must be contiguous, got strides [1, 3]" in out, out


def test_a_record_of_another_version_is_refused(runner, package, tmp_path):
    path = str(tmp_path / "v1.pt2")
    shutil.copy(package.bare, path)
    with zipfile.ZipFile(path, "a") as archive:
        root = archive.namelist()[0].partition("/")[0]
        archive.writestr(f"{root}/{torch_aoti.RECORDS}0.json", json.dumps({"ops": []}))
    rc, out = _run(runner, "register", path)
    assert rc == 3 and "a tensorplug record of version 1; this registration library reads version 3 only" in out, out


def test_a_python_process_loads_the_record(package):
    # torch_aoti.load_package reads the record it writes (the ops are declared in this process already).
    model = torch_aoti.load_package(package.path)
    first, cube = model(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert first.tolist() == package.expected and cube.flatten().tolist() == package.cube


def test_a_python_process_still_reads_a_version_2_record(package, tmp_path):
    # Version 2 held the rule in a form of its own ("program") and the result count as
    # "outputs"; load_package declares ops from what every version holds. The ops are renamed
    # so that this process declares them from the record.
    def change(entries):
        for entry in entries:
            entry["name"] = entry["name"].replace("tpserve::", "tpserve_v2::")
            entry["outputs"] = entry.pop("n_outputs")
            for p in entry["params"]:
                del p["code"]
    entries = torch_aoti.records(package.path)
    change(entries)
    path = str(tmp_path / "v2.pt2")
    shutil.copy(package.bare, path)
    with zipfile.ZipFile(path, "a") as archive:
        root = archive.namelist()[0].partition("/")[0]
        archive.writestr(f"{root}/{torch_aoti.RECORDS}0.json", json.dumps({"version": 2, "ops": entries}))
    model = torch_aoti.load_package(path)
    assert repr(tensorplug.get_op("tpserve_v2::row_sum").returns) == repr(tensorplug.Output(shape=("x.shape[0]",),
                                                                                            dtype="x"))
    assert tensorplug.get_op("tpserve_v2::axpy").written == ("out",)
    first, cube = model(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert first.tolist() == package.expected and cube.flatten().tolist() == package.cube
