"""Each stage of attention's data flow described once: what it reads, what it makes, how.

:mod:`qkvcli.stages.table` names every stage (the projection, the head split, RoPE,
chapter 37's cache append, the scores, the scale, the mask, the softmax, the mixture,
the head merge, the output projection, and each one's reverse, dX's three paths among
them): its operands and its output with their axes named, its formula in the chapters'
notation, and how one output element is made. :mod:`qkvcli.stages.terms` applies a
description to one coordinate of the engine's arrays: the terms (operand values) that
make that element, as a :class:`~qkvcli.stages.terms.Derivation`. Pure data and NumPy:
no I/O, no wording beyond the terms' labels; the explorer page reads it, and so may a
terminal figure's worked lines or a diagnosis.
"""
