"""Opaque handles (`tensorplug.Handle`): typed handles with deleters (`tensorplug::Handle<T>`),
untyped `void*` handles, their lifetime (the deleter runs once, when the last reference in
Python or C++ goes; at interpreter exit too) and the errors for every wrong use. Every
library is compiled by a real compiler run (tests/support/handle_kernels/)."""

from __future__ import annotations

import gc
import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensorplug
from tensorplug import cpp

np = pytest.importorskip("numpy")

KERNELS = Path(__file__).parents[1] / "support" / "handle_kernels"


@pytest.fixture(scope="module")
def paths():
    return {
        "a": cpp.build("handles_owner", [KERNELS / "owner.cc"]),
        "b": cpp.build("handles_other", [KERNELS / "other.cc"]),
        "c": cpp.build("handles_counter", [KERNELS / "counter.c"]),
    }


@pytest.fixture(scope="module")
def liba(paths):
    return tensorplug.load_module(paths["a"])


@pytest.fixture(scope="module")
def libb(paths):
    return tensorplug.load_module(paths["b"])


@pytest.fixture(scope="module")
def libc(paths):
    return tensorplug.load_module(paths["c"])


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120, env={**__import__("os").environ, "TP_TEST_TRACE_DELETES": "1"})


# ------------------------------------------------------------------ typed handles ----

def test_a_typed_handle_round_trips(liba):
    plan = liba.make_plan(3)
    assert type(plan) is tensorplug.Handle
    assert (plan.type_name, plan.owning, plan.closed) == ("liba.Plan", True, False)
    assert re.fullmatch(r"<tensorplug\.Handle liba\.Plan at 0x[0-9a-f]+>", repr(plan))
    assert liba.plan_n(plan) == 3
    assert liba.plan_n(plan=plan) == 3
    # The same handle back: a new Python object for the same object, equal and hashing alike.
    again = liba.same(plan)
    assert again is not plan and again == plan and hash(again) == hash(plan)
    assert liba.make_plan(3) != plan
    # Its pointer is what a void* parameter receives.
    assert plan.address == liba.address(plan) == liba.address(liba.pointer(plan))


def test_ctypes_reads_a_handle_as_a_pointer(liba):
    import ctypes

    plan = liba.make_plan(21)  # a liba::Plan: one int64
    assert plan._as_parameter_ == plan.address
    assert ctypes.cast(plan, ctypes.POINTER(ctypes.c_int64)).contents.value == 21
    assert ctypes.string_at(liba.pointer(plan), 8) == (21).to_bytes(8, sys.byteorder)


def test_a_handle_and_a_tensor_in_one_call(liba):
    x = np.arange(4, dtype=np.float32)
    liba.scale(x, liba.make_plan(3))
    assert x.tolist() == [0.0, 3.0, 6.0, 9.0]


def test_signatures_show_handles(liba, libc):
    assert liba.plan_n.signature_text == "plan:handle<liba.Plan>->int"
    assert liba.address.signature_text == "ptr:handle->int"
    assert str(inspect.signature(liba.plan_n)) == "(plan: 'Handle') -> 'int'"
    assert str(inspect.signature(liba.make_plan)) == "(n: 'int') -> 'Handle'"
    assert str(inspect.signature(liba.maybe_n)) == "(plan: 'Optional[Handle]' = None) -> 'Any'"
    assert str(inspect.signature(libc.counter_next)) == "(counter: 'Handle') -> 'int'"


def test_none_for_optional_handles_and_undefined_results(liba):
    assert liba.maybe_n(None) is None
    assert liba.maybe_n() is None
    assert liba.maybe_n(liba.make_plan(5)) == 5
    assert liba.no_plan() is None
    assert liba.null_pointer() is None
    assert liba.is_none(None) is True and liba.is_none(liba.make_plan(1)) is False
    assert liba.is_none.signature_text == "ptr:?handle->bool"


def test_a_custom_deleter_runs_once(liba):
    freed = liba.buffers_freed()
    buffer = liba.make_buffer(10)
    assert liba.buffer_size(buffer) == 10 and buffer.type_name == "liba.Buffer"
    del buffer
    gc.collect()
    assert liba.buffers_freed() == freed + 1


def test_a_plain_c_library_makes_and_checks_handles(libc):
    freed = libc.counters_freed()
    counter = libc.counter_new(10)
    assert (counter.type_name, counter.owning) == ("cdemo.Counter", True)
    assert [libc.counter_next(counter) for _ in range(3)] == [11, 12, 13]
    del counter
    assert libc.counters_freed() == freed + 1


# ---------------------------------------------------------------------- lifetime ----

def test_the_deleter_runs_when_the_last_reference_goes(liba):
    deleted = liba.plans_deleted()
    plan = liba.make_plan(1)
    alias = plan
    del plan
    assert liba.plans_deleted() == deleted  # `alias` still holds it
    liba.keep(alias)  # and now C++ too
    del alias
    gc.collect()
    assert liba.plans_deleted() == deleted
    assert liba.drop_kept() == 1
    assert liba.plans_deleted() == deleted + 1


def test_two_python_objects_share_one_object(liba):
    deleted = liba.plans_deleted()
    plan = liba.make_plan(2)
    again = liba.same(plan)
    del plan
    assert liba.plans_deleted() == deleted and liba.plan_n(again) == 2
    del again
    assert liba.plans_deleted() == deleted + 1


def test_close_frees_now_and_once(liba):
    deleted = liba.plans_deleted()
    with liba.make_plan(4) as plan:
        assert liba.plan_n(plan) == 4
    assert plan.closed and liba.plans_deleted() == deleted + 1
    assert re.fullmatch(r"<tensorplug\.Handle liba\.Plan at 0x[0-9a-f]+, closed>", repr(plan))
    plan.close()  # a second close does nothing
    del plan
    assert liba.plans_deleted() == deleted + 1
    # Closing one Python object leaves the others' references alone.
    plan = liba.make_plan(5)
    again = liba.same(plan)
    plan.close()
    assert liba.plan_n(again) == 5 and liba.plans_deleted() == deleted + 1
    assert plan != again  # a closed handle equals only itself
    del again
    assert liba.plans_deleted() == deleted + 2


def test_storage_keeps_a_reference(liba):
    deleted = liba.plans_deleted()
    plan = liba.make_plan(6)
    liba.store_plan("tests.handles.plan", plan)
    del plan
    try:
        assert liba.stored_n("tests.handles.plan") == 6
        stored = tensorplug.storage.get("tests.handles.plan")
        assert type(stored) is tensorplug.Handle and liba.plan_n(stored) == 6
        del stored
        assert liba.plans_deleted() == deleted
    finally:
        tensorplug.storage.erase("tests.handles.plan")
    assert liba.plans_deleted() == deleted + 1


def test_a_handle_stored_from_python_reaches_cpp(liba):
    deleted = liba.plans_deleted()
    plan = liba.make_plan(12)
    tensorplug.storage.set("tests.handles.from_python", plan)
    try:
        assert liba.stored_n("tests.handles.from_python") == 12
        assert tensorplug.storage.get("tests.handles.from_python") == plan
        del plan
        assert liba.plans_deleted() == deleted  # the storage holds a reference
        closed = liba.make_plan(13)
        closed.close()
        with pytest.raises(ValueError, match=r"^storage\.set\(\) argument 'value': the handle was closed$"):
            tensorplug.storage.set("tests.handles.closed", closed)
        assert not tensorplug.storage.contains("tests.handles.closed")
    finally:
        tensorplug.storage.erase("tests.handles.from_python")
    assert liba.plans_deleted() == deleted + 2


def test_a_pointer_stored_by_cpp_reads_as_a_non_owning_handle(liba):
    plan = liba.make_plan(6)
    liba.store_pointer("tests.handles.pointer", plan)
    try:
        stored = tensorplug.storage.get("tests.handles.pointer")
        assert type(stored) is tensorplug.Handle
        assert (stored.address, stored.owning, stored.type_name) == (plan.address, False, None)
    finally:
        tensorplug.storage.erase("tests.handles.pointer")


def test_handles_cross_python_callbacks(liba):
    plan = liba.make_plan(7)
    seen = []

    def inspect_plan(p):
        seen.append(p)
        return liba.plan_n(p) * 2

    assert liba.call_with_plan(inspect_plan, plan) == 14
    assert seen == [plan] and seen[0].type_name == "liba.Plan"
    assert liba.plan_from_callback(lambda: liba.make_plan(8)) == 8
    closed = liba.make_plan(9)
    closed.close()
    with pytest.raises(ValueError, match=r"plan_from_callback\(\) argument 1 'f': a Python callback returned a "
                                         r"closed tensorplug\.Handle"):
        liba.plan_from_callback(lambda: closed)
    with pytest.raises(TypeError, match=r"^Any::cast: expected a handle of type liba\.Plan, got an untyped handle$"):
        liba.plan_from_callback(lambda: liba.pointer(plan))


def test_the_any_kind_passes_the_handle_itself(liba):
    assert liba.describe(liba.make_plan(1)) == "a handle of type liba.Plan"
    assert liba.describe(liba.pointer(liba.make_plan(1))) == "an untyped handle"


def test_closing_a_handle_during_a_call_frees_it_after_the_call(paths):
    # Subprocess: a handle freed while the kernel reads it would be a use after free.
    proc = _run(f"""
        import tensorplug
        liba = tensorplug.load_module({paths['a']!r})
        plan = liba.make_plan(11)
        def close():
            plan.close()
            print("closed, deleted:", liba.plans_deleted())
        print("read:", liba.read_after_callback(close, plan))
        print("after, deleted:", liba.plans_deleted())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["closed, deleted: 0", "deleted plan 11", "read: 11", "after, deleted: 1"]


def test_interpreter_exit_runs_each_deleter_at_most_once(paths):
    # Handles in module globals, in a reference cycle, closed ones, ones kept by C++ statics
    # and by provider storage: the process exits cleanly and no deleter runs twice.
    proc = _run(f"""
        import tensorplug
        liba = tensorplug.load_module({paths['a']!r})
        libc = tensorplug.load_module({paths['c']!r})
        g_plan = liba.make_plan(1)
        cycle = [liba.make_plan(2)]
        cycle.append(cycle)
        closed = liba.make_plan(3)
        closed.close()
        liba.keep(liba.make_plan(4))
        liba.store_plan("exit.plan", liba.make_plan(5))
        g_counter = libc.counter_new(0)
        g_void = liba.pointer(g_plan)
        print("exiting")
    """)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["deleted plan 3", "exiting"]
    deleted = [line for line in lines[2:] if line.startswith("deleted plan")]
    assert len(deleted) == len(set(deleted)) and set(deleted) <= {f"deleted plan {n}" for n in (1, 2, 4, 5)}
    # Python finalizes module globals, C++ destroys its statics, storage empties at exit.
    assert {"deleted plan 1", "deleted plan 4", "deleted plan 5"} <= set(deleted)


# ------------------------------------------------------------------------ errors ----

def test_a_handle_is_refused_where_another_kind_is_expected(liba):
    plan = liba.make_plan(1)
    with pytest.raises(TypeError, match=r"^scale\(\) argument 1 'x': expected a tensor, got tensorplug\.Handle$"):
        liba.scale(plan, plan)
    with pytest.raises(TypeError, match=r"^make_plan\(\) argument 1 'n': expected an int, got tensorplug\.Handle$"):
        liba.make_plan(plan)
    with pytest.raises(TypeError, match=r"argument 1 'key': expected a str, got tensorplug\.Handle$"):
        liba.stored_n(plan)
    with pytest.raises(TypeError, match=r"^call_with_plan\(\) argument 1 'f': expected a callable, "
                                        r"got tensorplug\.Handle$"):
        liba.call_with_plan(plan, plan)
    with pytest.raises(TypeError, match=r"^total_numel\(\) argument 1 'xs' item 1: expected a tensor, "
                                        r"got tensorplug\.Handle$"):
        liba.total_numel([np.ones(2, np.float32), plan])
    with pytest.raises(TypeError, match=r"^length\(\) argument 1 'values' item 0: expected an int, "
                                        r"got tensorplug\.Handle$"):
        liba.length([plan])
    with pytest.raises(TypeError, match=r"^length\(\) argument 1 'values': expected a list of ints, "
                                        r"got tensorplug\.Handle$"):
        liba.length(plan)
    good = [1.0, True, "cpu", "float32"]
    for i, expected in enumerate(["a float", "a bool", "a device such as 'cpu', 'cuda:0' or (device_type, device_id)",
                                  "a dtype: bool, int8/16/32/64, uint8/16/32/64, float16/32/64, bfloat16, "
                                  "complex64/128, a float8 kind (float8_e4m3fn, float8_e5m2, ...) or a framework's "
                                  "dtype whose str() ends in one of them"]):
        args = good[:i] + [plan] + good[i + 1:]
        with pytest.raises(TypeError, match=rf"^kinds\(\) argument {i + 1} '\w': expected {re.escape(expected)}, "
                                            r"got tensorplug\.Handle$"):
            liba.kinds(*args)
    assert liba.kinds(*good) is None


def test_other_values_are_refused_where_a_handle_is_expected(liba):
    with pytest.raises(TypeError, match=r"^plan_n\(\) argument 1 'plan': expected a handle of type liba\.Plan, "
                                        r"got int$"):
        liba.plan_n(3)
    with pytest.raises(TypeError, match=r"^address\(\) argument 1 'ptr': expected a tensorplug\.Handle, got int$"):
        liba.address(0x1000)  # an int is never a pointer
    with pytest.raises(TypeError, match=r"^plan_n\(\) argument 1 'plan': expected a handle of type liba\.Plan, "
                                        r"got numpy\.ndarray$"):
        liba.plan_n(np.zeros(1))
    with pytest.raises(TypeError, match=r"^plan_n\(\) argument 1 'plan': expected a handle of type liba\.Plan, "
                                        r"got NoneType$"):
        liba.plan_n(None)


def test_a_handle_of_another_type_is_refused(liba, libb, libc):
    a_plan, b_plan = liba.make_plan(1), libb.make_plan(0.5)
    assert libb.plan_scale(b_plan) == 0.5
    with pytest.raises(TypeError, match=r"^plan_scale\(\) argument 1 'plan': expected a handle of type libb\.Plan, "
                                        r"got a handle of type liba\.Plan$"):
        libb.plan_scale(a_plan)
    with pytest.raises(TypeError, match=r"^plan_n\(\) argument 1 'plan': expected a handle of type liba\.Plan, "
                                        r"got a handle of type libb\.Plan$"):
        liba.plan_n(b_plan)
    with pytest.raises(TypeError, match=r"^counter_next\(\) argument 1 'counter': expected a handle of type "
                                        r"cdemo\.Counter, got a handle of type liba\.Plan$"):
        libc.counter_next(a_plan)
    with pytest.raises(TypeError, match=r"^plan_n\(\) argument 1 'plan': expected a handle of type liba\.Plan, "
                                        r"got an untyped handle$"):
        liba.plan_n(liba.pointer(a_plan))
    with pytest.raises(TypeError, match=r"^plan_n\(\) argument 1 'plan': expected a handle of type liba\.Plan, "
                                        r"got a handle of type liba\.Buffer$"):
        liba.plan_n(liba.make_buffer(1))


def test_cpp_callers_are_checked_by_the_callee(liba, libb):
    # C++ -> C++ through the registry: no Python check on the way, the callee's own.
    with pytest.raises(TypeError, match=r"^call_global\(\) argument 2 'plan': expected a handle of type liba\.Plan, "
                                        r"got a handle of type libb\.Plan$"):
        liba.call_global("libb.plan_scale", libb.make_plan(0.25))
    with pytest.raises(TypeError, match=r"^libb\.plan_scale\(\) argument 1 'plan': expected a handle of type "
                                        r"libb\.Plan, got a handle of type liba\.Plan$"):
        liba.call_global("libb.plan_scale", liba.make_plan(1))


def test_a_closed_handle_is_refused(liba):
    plan = liba.make_plan(1)
    pointer = liba.pointer(plan)
    plan.close()
    with pytest.raises(ValueError, match=r"^plan_n\(\) argument 1 'plan': the handle was closed$"):
        liba.plan_n(plan)
    with pytest.raises(ValueError, match=r"^address\(\) argument 1 'ptr': the handle was closed$"):
        liba.address(plan)
    with pytest.raises(ValueError, match=r"^describe\(\) argument 1 'value': the handle was closed$"):
        liba.describe(plan)
    # A non-owning handle derived from it is not tracked: it is as valid as its library says.
    assert pointer.owning is False and re.search(r", non-owning>$", repr(pointer))


def test_type_names_follow_one_rule(libc, tmp_path):
    with pytest.raises(ValueError, match=r"^TPHandleCreate: type name 'bad name' is not made of letters, digits, "
                                         r"'_', '\.' and ':'$"):
        libc.bad_type_name()
    assert libc.counters_freed() >= 0  # the library is intact (the deleter was not run on static memory)
    bad = tmp_path / "bad_signature.c"
    bad.write_text("#include <tensorplug/c_api.h>\n"
                   "TP_EXPORT int __tensorplug_bad_signature(void* s, const TPAny* a, int32_t n, TPAny* r) {\n"
                   "  (void)s; (void)a; (void)n; r->type_index = kTPNone; return 0;\n}\n"
                   "TP_EXPORT const char* __tensorplugsig_bad_signature(void) { return \"x:handle<a-b>->int\"; }\n")
    with pytest.raises(ValueError, match=r"function bad_signature exports a malformed signature: "
                                         r"'x:handle<a-b>->int'"):
        tensorplug.load_module(cpp.build("handles_bad_signature", [bad], build_directory=tmp_path / "bad"))
    # A Handle<T> without a declared type name does not compile, and says what to do.
    source = tmp_path / "undeclared.cc"
    source.write_text("#include <tensorplug/tensorplug.h>\nstruct Plan {};\n"
                      "tensorplug::Handle<Plan> Make() { return {}; }\nTENSORPLUG_EXPORT(make, Make);\n")
    with pytest.raises(cpp.BuildError, match=r"declare the type's name with TENSORPLUG_HANDLE_TYPE"):
        cpp.build("handles_undeclared", [source], build_directory=tmp_path / "build")


def test_handles_are_made_by_kernels_only():
    with pytest.raises(TypeError, match=r"cannot create 'tensorplug\.Handle' instances"):
        tensorplug.Handle()


def test_an_op_refuses_handle_parameters_and_results(liba):
    with pytest.raises(ValueError, match=r"^tensorplug\.op\('handles::plan_n'\): parameter 'plan' is a handle; "
                                         r"operators take tensors"):
        tensorplug.op("handles::plan_n", liba.plan_n)
    with pytest.raises(ValueError, match=r"^tensorplug\.op\('handles::make_plan'\): make_plan returns a handle; "
                                         r"operators return tensors"):
        tensorplug.op("handles::make_plan", liba.make_plan)
