"""Sharding rules: how an op's work splits over the devices of a mesh, declared once.

A kernel sees whole tensors. When a framework's distributed engine (``jax.jit`` over a
device mesh, torch's ``DTensor``) holds an input split over devices, it must know which
splits the kernel can run on, one shard per device, and what the result's split is. Without
that knowledge jax gathers every input onto every device and torch refuses the op. The
kernel author states it once, as ``tensorplug.op(..., sharding=...)``, in an einsum-like
string over the op's tensors:

- ``"b i, i j -> b j"``: one term per tensor parameter (signature order), then ``->`` and
  one term per tensor the kernel allocates; each term names the dimensions of its tensor
  (factors). A factor named in several places is one dimension of the work: splitting it
  splits every tensor that has it alike.
- A factor may be split when it appears in an input and in every result (the allocated
  tensors and the tensors the kernel writes): each device then computes its own part of
  every result. Every other factor stays whole: a factor of the inputs only (a reduction,
  the inner dimension of a matmul) and a factor of the results only (a size taken from an
  integer argument). An input whose factors all stay whole is replicated (a weight).
- ``[n]`` marks a factor that must stay whole although it would qualify (an FFT axis, a
  scan): the frameworks gather that dimension, and only that one, before the kernel runs.
- ``...`` stands for the leading dimensions a term does not name, the same number in
  every term that has it (``"... n -> ... n"``).
- ``"elementwise"``: every tensor parameter and result has one shape and every dimension
  may be split (``"..., ... -> ..."`` with one term per tensor).

A tensor the kernel writes (a ``MutableView`` parameter) keeps its input term as its
result. The rule is checked against the signature when the op is declared, and against
shapes on every framework's path: a term whose rank differs from its tensor's, a factor
whose sizes differ between tensors, or an output rule that disagrees with the sharding
rule (globally, or on one shard of the inputs) is a ValueError naming the op.

Pure Python; no framework is imported here. Adapters read :class:`ShardingRule` and the
:class:`BoundRule` of a call and build their framework's form (docs/compilers.md).
"""

from __future__ import annotations

import re
from collections import namedtuple

from .shapes import RuleError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (import time: docs/decisions.md)
if TYPE_CHECKING:
    from typing import Any

#: The short form for ops whose tensors all have one shape, split alike.
ELEMENTWISE = "elementwise"
ELLIPSIS = "..."

_FACTOR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WHOLE = re.compile(r"\[([A-Za-z_][A-Za-z0-9_]*)\]")


class ShardingRule:
    """A parsed, signature-checked sharding rule (made by :func:`compile_sharding`).

    ``text``: the rule as declared; ``inputs``: ``(parameter name, term)`` per tensor
    parameter; ``outputs``: one term per allocated tensor; ``written``: the names of the
    tensor parameters the kernel writes; ``results``: the terms of the
    op's results as the frameworks return them (the written parameters' terms, then the
    outputs); ``whole``: the factors marked ``[f]``. A term is a tuple of factor names and
    at most one ``"..."``.
    """

    def __init__(self, text: str, inputs, outputs, written, whole: frozenset[str]):
        self.text = text
        self.inputs: tuple[tuple[str, tuple[str, ...]], ...] = inputs
        self.outputs: tuple[tuple[str, ...], ...] = outputs
        self.written: tuple[str, ...] = written
        by_name = dict(inputs)
        self.results: tuple[tuple[str, ...], ...] = tuple(by_name[name] for name in written) + outputs
        self.whole = whole

    def __repr__(self) -> str:
        return f"ShardingRule({self.text!r})"

    def bind(self, op, specs: dict[str, Any]) -> BoundRule:
        """The rule for one call of ``op`` (the :class:`tensorplug.Op`): ``specs`` the
        arguments by name with tensors as :class:`~tensorplug.TensorSpec` (as for
        ``Op.output_specs``). ValueError naming the op when a term's rank, or a factor's
        size, does not fit the tensors or the outputs the op's output rule gives."""
        where = f"{op.name}: sharding rule {self.text!r}"
        outputs = op.output_specs(specs)
        shaped: list[tuple[str, tuple[str, ...], tuple]] = []  # (what, term, shape) of every tensor
        for name, term in self.inputs:
            spec = specs.get(name)
            if spec is not None:
                shaped.append((f"argument '{name}'", term, tuple(spec.shape)))
        for i, (term, spec) in enumerate(zip(self.outputs, outputs)):
            shaped.append((f"output {i}", term, tuple(spec.shape)))

        # "..." stands for the same number of dimensions in every term that has it.
        n_ellipsis = None
        for what, term, shape in shaped:
            if ELLIPSIS not in term:
                if len(term) != len(shape):
                    raise ValueError(f"{where}: {what} has {len(shape)} dimensions {shape}, its term "
                                     f"'{' '.join(term)}' names {len(term)}")
                continue
            n = len(shape) - (len(term) - 1)
            if n < 0:
                raise ValueError(f"{where}: {what} has {len(shape)} dimensions {shape}, its term "
                                 f"'{' '.join(term)}' names at least {len(term) - 1}")
            if n_ellipsis is not None and n != n_ellipsis:
                raise ValueError(f"{where}: '...' stands for {n_ellipsis} dimensions in one term and {n} in "
                                 f"{what} {shape}; it must stand for the same number in every term")
            n_ellipsis = n
        expand = _expander(n_ellipsis or 0)

        sizes: dict[str, Any] = {}
        source: dict[str, str] = {}
        for what, term, shape in shaped:
            for factor, size in zip(expand(term), shape):
                if not isinstance(size, int):  # a compiler's symbolic size: nothing to compare
                    continue
                if factor in sizes and sizes[factor] != size:
                    raise ValueError(f"{where}: dimension '{_shown(factor)}' is {sizes[factor]} in "
                                     f"{source[factor]} and {size} in {what} {shape}")
                sizes.setdefault(factor, size)
                source.setdefault(factor, f"{what} {shape}")
        inputs = {name: expand(term) for name, term in self.inputs if specs.get(name) is not None}
        outs = tuple(expand(term) for term in self.outputs)
        results = tuple(inputs[name] for name in self.written if name in inputs) + outs
        splittable: set[str] = set()
        for term in inputs.values():
            splittable.update(term)
        for term in results:
            splittable.intersection_update(term)
        splittable -= self.whole
        if not results:
            splittable.clear()
        return BoundRule(self, op, specs, inputs, outs, results, frozenset(splittable), sizes)


class BoundRule(namedtuple("BoundRule", ("rule", "op", "specs", "inputs", "outputs", "results", "splittable", "sizes"))):
    """A :class:`ShardingRule` for one call, ``...`` expanded into factors of their own
    (named ``...0``, ``...1``, ...): ``inputs`` the term of each tensor argument given (by
    parameter name), ``outputs`` the term of each allocated tensor, ``results`` the terms
    of the results the frameworks return (written arguments given, then outputs),
    ``splittable`` the factors that may be split, ``sizes`` each factor's size."""

    __slots__ = ()

    def check_split(self, parts: dict[str, int]) -> None:
        """Refuse (ValueError naming the op) the split of factor ``f`` into ``parts[f]``
        shards when the op's output rule, given one shard of the inputs, does not give one
        shard of the outputs as the sharding rule describes them (the first shard: sizes
        rounded up, as the frameworks tile)."""
        parts = {f: n for f, n in parts.items() if n > 1}
        if not parts:
            return
        specs = dict(self.specs)
        for name, term in self.inputs.items():
            spec = specs[name]
            specs[name] = spec._replace(shape=tuple(_part(size, parts.get(f, 1)) for f, size in zip(term, spec.shape)))
        for i, (term, spec) in enumerate(zip(self.outputs, self.op.output_specs(specs))):
            # A factor of symbolic size (a compiler's, not in `sizes`) has no number to
            # compare: that dimension is the output rule's own.
            expected = tuple(_part(self.sizes[f], parts[f]) if f in parts and f in self.sizes else self.sizes.get(f, s)
                             for f, s in zip(term, spec.shape))
            if tuple(spec.shape) != expected:
                split = ", ".join(f"'{_shown(f)}' split in {n}" for f, n in parts.items())
                raise ValueError(f"{self.op.name}: sharding rule {self.rule.text!r}: with {split}, the output rule "
                                 f"makes output {i} {tuple(spec.shape)} on one shard, the sharding rule "
                                 f"{expected}: the two rules disagree")


def _part(size, n: int):
    return -(-size // n) if n > 1 and isinstance(size, int) else size


def _expander(n: int):
    names = tuple(f"...{k}" for k in range(n))

    def expand(term: tuple[str, ...]) -> tuple[str, ...]:
        if ELLIPSIS not in term:
            return term
        at = term.index(ELLIPSIS)
        return term[:at] + names + term[at + 1:]

    return expand


def _shown(factor: str) -> str:
    return f"... (dimension {factor[3:]})" if factor.startswith(ELLIPSIS) else factor


def compile_sharding(sharding, params, n_outputs: int) -> ShardingRule | None:
    """The :class:`ShardingRule` for ``sharding`` (a rule string, ``"elementwise"`` or
    None), checked against ``params`` (the op's :class:`tensorplug.ops.Param` tuple) and
    its number of allocated outputs; RuleError for a rule that does not fit."""
    if sharding is None:
        return None
    if not isinstance(sharding, str):
        raise RuleError(f"sharding: expected a rule string such as 'b i, i j -> b j' or 'elementwise', "
                        f"got {type(sharding).__name__}")
    tensors = [p for p in params if p.is_tensor]
    lists = [p.name for p in params if p.kind == "views"]
    if lists:
        raise RuleError(f"sharding: parameter {lists[0]!r} is a list of tensors; a sharding rule covers tensor "
                        "parameters only (an op taking a list has none yet)")
    text = sharding.strip()
    if text == ELEMENTWISE:
        text = ", ".join([ELLIPSIS] * len(tensors)) + " -> " + ", ".join([ELLIPSIS] * n_outputs)
    left, arrow, right = text.partition("->")
    if not arrow or "->" in right:
        raise RuleError(f"sharding: {sharding!r} needs one '->' between the inputs' terms and the outputs' terms "
                        "(or is 'elementwise')")
    in_terms = [_term(t, sharding) for t in left.split(",")] if tensors or left.strip() else []
    out_terms = [_term(t, sharding) for t in right.split(",")] if n_outputs or right.strip() else []
    if len(in_terms) != len(tensors):
        raise RuleError(f"sharding: {sharding!r} has {len(in_terms)} input terms; the kernel has {len(tensors)} "
                        f"tensor parameters ({', '.join(p.name for p in tensors) or 'none'}), one term each")
    if len(out_terms) != n_outputs:
        raise RuleError(f"sharding: {sharding!r} has {len(out_terms)} output terms; the kernel allocates "
                        f"{n_outputs} tensors, one term each (a tensor it writes keeps its input term)")

    whole: set[str] = set()
    plain: set[str] = set()
    terms = []
    for term in in_terms + out_terms:
        names = []
        for token in term:
            if token == ELLIPSIS:
                names.append(token)
                continue
            m = _WHOLE.fullmatch(token)
            (whole if m else plain).add(m.group(1) if m else token)
            names.append(m.group(1) if m else token)
        terms.append(tuple(names))
    both = sorted(whole & plain)
    if both:
        raise RuleError(f"sharding: {sharding!r} writes factor {both[0]!r} both as [{both[0]}] and as {both[0]}; "
                        "mark it [..] everywhere or nowhere")
    n_in = len(in_terms)
    if any(ELLIPSIS in t for t in terms[n_in:]) and not any(ELLIPSIS in t for t in terms[:n_in]):
        raise RuleError(f"sharding: {sharding!r} has '...' in an output term but in no input term, which would "
                        "give its dimensions")
    inputs = tuple((p.name, t) for p, t in zip(tensors, terms[:n_in]))
    written = tuple(p.name for p in tensors if p.written)
    return ShardingRule(sharding.strip(), inputs, tuple(terms[n_in:]), written, frozenset(whole))


def _term(text: str, rule: str) -> tuple[str, ...]:
    tokens = tuple(text.split())
    seen = set()
    for token in tokens:
        name = token[1:-1] if token.startswith("[") and token.endswith("]") else token
        if token != ELLIPSIS and not (_FACTOR.fullmatch(token) or _WHOLE.fullmatch(token)):
            raise RuleError(f"sharding: {rule!r}: {token!r} is not a factor (a name such as 'b', '[n]' for one "
                            "that stays whole, or '...')")
        if name in seen:
            what = "'...' appears" if token == ELLIPSIS else f"factor {name!r} appears"
            raise RuleError(f"sharding: {rule!r}: {what} twice in the term '{text.strip()}'; a term names each "
                            "dimension once")
        seen.add(name)
    return tokens


__all__ = ["BoundRule", "ELEMENTWISE", "ShardingRule", "compile_sharding"]
