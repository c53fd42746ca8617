"""torch's side of an op's declared backward (:mod:`tensorplug.gradients`): the autograd
formula of each ``torch.library`` custom op, registered with the op (:mod:`.registration`).

- An op with a backward gets an autograd formula (``_autograd_kernel``, what
  ``torch.library.register_autograd`` makes, leaner) with a ``setup_context``
  that keeps what the declaration ``saves`` (tensors through ``ctx.save_for_backward``,
  scalars on ``ctx``) and a backward that calls the backward op (itself a torch custom op,
  so a backward with a backward of its own gives second derivatives, and
  ``torch.compile``'s aot_autograd traces it as one node). Each gradient it returns is
  checked against its parameter's shape and dtype, and a gradient asked of a tensor
  parameter the declaration leaves out is an error naming it.
- An op without a backward gets a formula that raises when a gradient reaches it, naming
  the op and how to declare one (torch's own fallback warns and gives None).
- An op that writes arguments (it cannot declare a backward) refuses, when it is called
  with grad mode on and a tensor argument requiring grad, naming the op: a gradient through
  its in-place write would be silently wrong.

Each Autograd kernel here notes the text of an exception it raises or passes on
(``_native.note_raised``): the native Autograd kernel above it, which calls
it through torch's dispatcher, reports that text where torch keeps none (before 2.13).

These kernels are Python. Where an op has the native kernel (``native``), its
default overload's Autograd kernel is native and calls the kernel here (registered on the
``grad`` overload) only for a call that needs Python: a gradient, a dispatch mode, a tensor
subclass. Elsewhere the kernel here is the default overload's, and every eager call pays
it (docs/decisions.md has the numbers).
"""

from __future__ import annotations

from ._native import note_raised
from tensorplug.gradients import no_backward_message
from tensorplug.shapes import dtype_name


def kernel(torch, op, below: str = "default"):
    """The Autograd kernel of ``op`` (a keyset-first function, registered by
    :mod:`.registration` with ``with_keyset=True``): for the default overload, or, where the
    default's Autograd kernel is native (``native.NativePlan.register_autograd``), for the
    overload that one passes calls needing Python on to. ``below`` names the overload whose
    kernels run below autograd: the default, or the native kernel's ``nograd`` (so that
    graphs traced through this kernel call that overload, which has no Autograd kernel of
    its own)."""
    if op.written:
        return _refuse_grad_of_written(torch, op, below)
    if op.backward is None:
        setup_context, backward = _no_context, _no_backward(op)
    else:
        setup_context, backward = _formula(op)
    return _autograd_kernel(torch, op, setup_context, backward, below)


def _below(torch, op, below: str):
    return getattr(getattr(getattr(torch.ops, op.namespace), op.opname), below)


def _autograd_kernel(torch, op, setup_context, backward, below: str):
    """The op's Autograd kernel: below autograd at once unless grad mode is on and a tensor
    argument requires grad, else through a ``torch.autograd.Function`` whose forward calls
    the op again (grad mode is off there: it goes below autograd). The kernel
    ``torch.library.register_autograd`` makes does the same with more Python per call
    (about 17 us against 5 us on an eager call that needs no gradient, docs/decisions.md)."""
    # torch's own (internal in torch 2.13, used by register_autograd's kernel too): the keys
    # below autograd, for the redispatch, and the C check of requires_grad over arguments.
    from torch._C import _after_autograd_keyset as below_autograd
    from torch._C import _any_requires_grad as any_requires_grad

    overload = None
    is_grad_enabled = torch.is_grad_enabled

    def forward(*args):
        return overload(*args)

    formula = type(f"{op.namespace}_{op.opname}_formula", (torch.autograd.Function,),
                   {"forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
                    "backward": staticmethod(backward)})

    def autograd(keyset, *args):
        nonlocal overload
        try:
            if overload is None:
                overload = _below(torch, op, below)
            if is_grad_enabled() and any_requires_grad(*args):
                return formula.apply(*args)
            return overload.redispatch(keyset & below_autograd, *args)
        except Exception as error:
            note_raised(f"{type(error).__name__}: {error}")
            raise

    autograd.__name__ = f"{op.opname}_autograd"
    return autograd


def _no_context(ctx, inputs, output):
    return None


def _formula(op):
    declared = op.backward
    params = op.params
    n_params = len(params)
    saves = declared.saves
    diff_index = declared.differentiable_index
    # Tensor parameters without a gradient: asking for one is an error.
    not_differentiable = [(i, p.name) for i, p in enumerate(params) if p.is_tensor and i not in diff_index]
    single = op.n_outputs == 1

    def setup_context(ctx, inputs, output):
        results = (output,) if single else tuple(output)
        values = declared.saved_values(tuple(inputs), results)
        ctx.save_for_backward(*(v for s, v in zip(saves, values) if s.is_tensor))
        ctx.tp_scalars = [v for s, v in zip(saves, values) if not s.is_tensor]
        ctx.tp_expected = [(tuple(inputs[i].shape), inputs[i].dtype) for i in diff_index]

    def backward(ctx, *grads):
        for i, name in not_differentiable:
            if ctx.needs_input_grad[i]:
                raise RuntimeError(declared.not_differentiable(name))
        tensors, scalars = iter(ctx.saved_tensors), iter(ctx.tp_scalars)
        saved = [next(tensors) if s.is_tensor else next(scalars) for s in saves]
        result = declared.function(*declared.arguments(grads, saved))  # bound by name (tensorplug.gradients)
        result = (result,) if len(diff_index) == 1 else tuple(result)
        out = [None] * n_params
        for k, (i, grad) in enumerate(zip(diff_index, result)):
            shape, dtype = ctx.tp_expected[k]
            declared.check_gradient(k, tuple(grad.shape), dtype_name(grad.dtype), shape, dtype_name(dtype))
            if ctx.needs_input_grad[i]:
                out[i] = grad
        return tuple(out)

    setup_context.__name__ = f"{op.opname}_setup_context"
    backward.__name__ = f"{op.opname}_backward"
    return setup_context, backward


def _no_backward(op):
    message = no_backward_message(op)

    def backward(ctx, *grads):
        raise RuntimeError(message)

    backward.__name__ = f"{op.opname}_no_backward"
    return backward


def _refuse_grad_of_written(torch, op, below: str):
    tensors = [i for i, p in enumerate(op.params) if p.is_tensor]
    message = f"{no_backward_message(op)}; or call it under torch.no_grad(), on tensors that do not require grad"
    from torch._C import _after_autograd_keyset as below_autograd

    overload = None

    def autograd(keyset, *args):
        nonlocal overload
        try:
            if torch.is_grad_enabled() and any(args[i] is not None and args[i].requires_grad for i in tensors):
                raise RuntimeError(message)
            if overload is None:
                overload = _below(torch, op, below)
            return overload.redispatch(keyset & below_autograd, *args)
        except Exception as error:
            note_raised(f"{type(error).__name__}: {error}")
            raise

    autograd.__name__ = f"{op.opname}_autograd"
    return autograd
