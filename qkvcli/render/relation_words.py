"""The words of a slip named by relation (:mod:`qkvcli.check.relations`,
:mod:`qkvcli.check.relate`): each relation clause, and a finding made of them, several
relations of one tensor said as "either ... or ..." (the fixtures cannot tell them
apart)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qkvcli.core.names import BRANCHES
from qkvcli.core.results import Clause

FACTOR_WORDS = {"0": "{0} is all zeros", "-1": "{0} has the wrong sign (-1 times qkv's)",
                "c": "{0} is a constant multiple of qkv's"}
REGION_WORDS = {"diagonal": "only on the diagonal (each query's own key)",
                "above": "only above the diagonal (each query's later keys)",
                "below": "only below the diagonal (each query's earlier keys)"}
AXIS_WORDS = {"head": "heads", "query": "query", "batch": "batch"}
VARIANT_WORDS = {
    "causal=false": "{0} gives qkv's results with causal=false: the causal mask is ignored",
    "causal=true": "{0} gives qkv's results with causal=true: the mask is applied with "
                   "causal=false too",
    "rope=false": "{0} gives qkv's results with rope=false: RoPE is not applied",
    "rope=true": "{0} gives qkv's results with rope=true: RoPE is applied with rope=false too",
    "rope-query-only": "{0}: RoPE turns the queries only (the keys are not turned)",
    "rope-key-only": "{0}: RoPE turns the keys only (the queries are not turned)",
    "rope-before-split": ("{0}: RoPE is applied before the head split (pairs and angles "
                          "over d_model instead of each head's d_h)"),
    "angles:pi/180": "{0}: RoPE's angles are taken as degrees (each angle times pi/180)",
    "angles:180/pi": "{0}: RoPE's angles are converted to degrees (each angle times 180/pi)",
    "angles:2": "{0}: RoPE's angles are twice the right ones",
    "angles:1/2": "{0}: RoPE's angles are half the right ones",
    "divisor:d_h": "{0}: each head's scores are divided by d_h instead of sqrt(d_h)",
    "divisor:d_model": "{0}: each head's scores are divided by d_model instead of sqrt(d_h)",
    "divisor:root d_model": ("{0}: each head's scores are divided by sqrt(d_model) instead "
                             "of sqrt(d_h)"),
    "divisor:d_h/2": ("{0}: each head's scores are divided by d_h/2 instead of sqrt(d_h) "
                      "(in Python, d_h ** 1/2 is (d_h ** 1) / 2)"),
    "divisor:2 d_h": ("{0}: each head's scores are divided by 2*d_h instead of sqrt(d_h) "
                      "(in Python, s / d_h ** 1/2 is (s / d_h) / 2)"),
    "merge:strided": ("{0}: the heads are merged strided (head h's column j at j*H + h) "
                      "instead of side by side (at h*d_h + j)"),
    "skipped:w_output": ("{0} leaves W_O out of the reverse: the heads' gradient is dY, not "
                         "dY W_O^T"),
    "mask:diagonal": "{0}: the causal mask hides the diagonal too (a position must see itself)",
    "mask:after-softmax": ("{0}: the causal mask is applied after the softmax (the later "
                           "keys' weights zeroed, the rows not normalised again)"),
    "offset-ignored": "{0}: RoPE ignores the offset (positions start at 0)",
    "mask:earlier": ("{0}: the causal mask hides the earlier positions instead of the later "
                     "ones"),
    "no-rowsum": "{0}: the softmax backward lacks its row-sum term (dZ = A * dA)",
    "no-softmax-reverse": "{0}: the gradient skips the softmax's reverse (dZ = dA)",
    "swapped:query-key": ("{0}: dQ and dK are each computed with the other's operand "
                          "(dQ = dS Q, dK = dS^T K)"),
    "untransposed:grad_input": ("{0}: grad_input's paths use the weights, not their "
                                "transposes (dX = dQ W_Q + dK W_K + dV W_V)"),
    "transposed:w_output": "{0} uses W_O transposed (merged W_O^T)",
    "split-back:reshaped": ("{0} splits dC = dY W_O^T into the heads with a reshape and no "
                            "transpose ([B,T,d] read as [B,H,T,d_h]), unlike the forward's "
                            "split"),
    "positions:from-one": "{0}: RoPE counts positions from 1 instead of 0",
    "mask:own-key": ("{0}: each step attends to the earlier keys alone, leaving its own key "
                     "and value out (the first step reads its own alone)"),
    "rowsum-axis:query": ("{0}: the softmax backward's row-sum term sums over the query "
                          "axis instead of each query's keys"),
    "value-path:no-w_output": ("{0}: dV is made from the heads of dY, not of dY W_O^T (W_O "
                               "left out of the value path)"),
    "dw-output:input": "{0}: grad_w_output is X^T dY instead of merged^T dY",
    "scale-after-softmax": ("{0}: the scores are scaled after the softmax (softmax(Q K^T) / "
                            "sqrt(d_h)) instead of before it"),
    "mask:output-unmasked": ("{0}: the output is mixed with the unmasked weights (the "
                             "weights returned are masked)"),
    "rope-value-not-key": "{0}: RoPE turns the queries and the values instead of the keys",
    "untransposed:grad_value": "{0}: grad_value is computed with A instead of A^T (dV = A dO)",
    "untransposed:grad_key": "{0}: grad_key is computed with dS instead of dS^T (dK = dS Q)",
    **{f"softmax-axis:{axis}": f"{{0}}: the softmax is taken over the {AXIS_WORDS[axis]} "
       "axis instead of over each query's keys" for axis in ("head", "query", "batch")},
    **{f"max-axis:{axis}": f"{{0}}: the softmax subtracts the maximum over the "
       f"{AXIS_WORDS[axis]} axis instead of each query's own row" for axis in ("query", "head")},
    **{f"positions:{axis}": f"{{0}}: RoPE takes each position from the {AXIS_WORDS[axis]} "
       "axis instead of the token axis" for axis in ("batch", "head")},
    **{f"transposed:w_{branch}": f"{{0}} uses W_{letter} transposed (X W_{letter}^T)"
       for branch, letter in zip(BRANCHES, "QKV", strict=True)},
    **{f"through:w_{branch}": f"{{0}} sends every path of grad_input through W_{letter}^T "
       f"(dX = (dQ + dK + dV) W_{letter}^T)" for branch, letter in zip(BRANCHES, "QKV", strict=True)},
}


def leak_words(offset: int) -> str:
    """A causal mask that hides only the keys ``offset`` or more positions ahead."""
    nearer = "its next key" if offset == 2 else f"its next {offset - 1} keys"
    return (f"the causal mask leaks: it hides only the keys {offset} or more positions "
            f"ahead, so each query also sees {nearer} (a mask such as np.triu(..., "
            f"k={offset}) where k=1 belongs)")


def _variant_words(code: str) -> str:
    """A variant's words, with ``{0}`` for the operation (a leaking mask's from its offset)."""
    if code.startswith("mask:from:"):
        return "{0}: " + leak_words(int(code.removeprefix("mask:from:")))
    return VARIANT_WORDS[code]


def _part(said: str) -> str:
    label, count = said.split("=", 1)
    kind, _, which = label.partition(":")
    part = f"the {which} path" if kind == "path" else f"batch item {which}"
    if count == "0":
        return f"misses {part}"
    if count == "2":
        return f"counts {part} twice"
    return f"counts {part} {constant(count)} times"


def _parts(tensor: str, *said: str) -> str:
    listed = [_part(s) for s in said]
    if all(s.startswith("item:") and s.endswith("=0") for s in said):
        return f"{tensor} " + ", ".join(listed) + ": it is not summed over the whole batch"
    if all(s.endswith("=0") for s in said):
        return f"{tensor} " + ", ".join(listed)
    return f"{tensor} " + ", ".join(listed) + " (qkv counts each once)"


def constant(name: str) -> str:
    """A named constant as the chapters write it: ``root d_k`` is ``sqrt(d_k)``."""
    if "root " in name:
        head, _, size = name.partition("root ")
        return f"{head}sqrt({size})"
    return name


FACTOR_MEANS = {"1/(B*T)": " (a mean over the B*T rows where qkv sums)",
                "1/B": " (a mean over the batch where qkv sums)",
                "root d_k": " (a 1/sqrt(d_k) left out)",
                "1/root d_k": " (divided by sqrt(d_k) once more)"}
"""What a factor says of the maths, where it says one thing."""


def _factor(tensor: str, name: str) -> str:
    said = FACTOR_WORDS.get(name, "{0} is {1} times qkv's").format(tensor, constant(name))
    return said + FACTOR_MEANS.get(name, "")


def _stages(before: str, result: str) -> str:
    """The stages from ``before`` to ``result`` as the one description of each says
    them, ``" (mixture: O = A V; head merge: …)"``, or nothing where none is listed."""
    from qkvcli.stages.table import between

    stages = between(before, result)
    return (" (" + "; ".join(f"{stage.name}: {stage.formula}" for stage in stages) + ")"
            if stages else "")


RELATION_WORDS: dict[str, Callable[..., str]] = {
    "factor": _factor,
    "exchanged": lambda tensor, axes: (
        f"{tensor} is qkv's transposed" if axes == "row/column"
        else f"{tensor} is qkv's with the {axes.replace('/', ' and ')} axes exchanged"),
    "one-for-all": lambda tensor, axis, which: (
        f"every {axis} of {tensor} is qkv's {which} {axis}"),
    "parts": _parts,
    "equals": lambda tensor, other: (
        f"{tensor} equals qkv's {other}: the stages after {other} are skipped"),
    "confined": lambda tensor, region: f"{tensor} differs from qkv's {REGION_WORDS[region]}",
    "float32": lambda tensor: (
        f"{tensor} agrees with qkv only to float32 rounding (every value a float32, tiny "
        "ones flushed to 0): float32 arithmetic"),
    "variant": lambda operation, code: (
        _variant_words(code.removeprefix("back:")).format(operation)
        + (" in the turn back through RoPE alone" if code.startswith("back:") else "")),
    "unexplained": lambda tensor: f"{tensor} is explained by no relation",
    "diverges": lambda tensor, before: (
        f"{tensor} is the first result that differs"
        + (f" ({before} right): the step from {before} to {tensor} is wrong" if before
           else "") + _stages(before, tensor)),
}
"""The words of each relation clause, from its facts."""


def relation(clause: Clause) -> str:
    """One relation in words."""
    return RELATION_WORDS[clause.code](*clause.facts)


PLURAL = {" is ": " are ", " has ": " have ", " misses ": " miss ", " counts ": " count ",
          " agrees ": " agree ", " differs ": " differ ", " equals ": " equal "}
"""A relation's verb said of several tensors at once."""
SOME = "\0"  # where the tensor's name goes, until the tensors sharing words are known


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def _of(names: list[str], words: str) -> str:
    """``words`` (with :data:`SOME` for the tensor) said of ``names``."""
    if len(names) > 1:
        for one, several in PLURAL.items():
            if words.startswith(SOME + one):
                words = SOME + several + words[len(SOME + one):]
                break
    return words.replace(SOME, _listed(names))


ON_THIS_FIXTURE = ("on this fixture, either ", "")
"""How a finding on one fixture says relations or slips it cannot tell apart: before
them, and after."""
ON_EVERY_FIXTURE = ("either ", " (the failing fixtures cannot tell them apart)")
"""How the summary of a report says them: each holds on every fixture that fails (what
the fixtures agree on), and no fixture there tells them apart."""


def relations(found: tuple[Clause, ...], either: tuple[str, str] = ON_THIS_FIXTURE) -> str:
    """The relations of a finding, in their order: several of one tensor as "either ...
    or ..." (``either``: the words around them), tensors related alike said together."""
    groups: dict[tuple[str, str], list[Clause]] = {}
    for clause in found:
        groups.setdefault((clause.code, clause.facts[0]), []).append(clause)
    alike: dict[str, list[str]] = {}  # the words with the tensor left out, to the tensors
    for clauses in groups.values():
        tensor = clauses[0].facts[0]
        words = [RELATION_WORDS[c.code](SOME, *c.facts[1:]) if c.code != "variant"
                 else relation(c) for c in clauses]
        said = words[0] if len(words) == 1 else (
            either[0] + " or ".join(words).replace(
                f" or {SOME} ", " or it ").replace(f" or {SOME}", " or it") + either[1])
        alike.setdefault(said, []).append(tensor)
    return "; ".join(_of(names, said) if said.startswith(SOME) or SOME in said
                     else said for said, names in alike.items())


CLAUSE_RELATION_WORDS: dict[str, Callable[..., Any]] = {
    "relation-differs": lambda found, mismatch, *_: f"{relations(found)}: {mismatch}",
    "relations": lambda found, otherwise, *_: (relations(found) if found
                                               else "" if otherwise is None else otherwise),
    **RELATION_WORDS,
}
"""The clause codes of a slip named by relation, for :data:`qkvcli.render.check.CLAUSE_WORDS`."""
