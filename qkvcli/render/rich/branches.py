"""How the rich figure names and colours the three branches and the shared input.

Colour only ever adds to a border or a word (the borders themselves are in
:mod:`qkvcli.render.rich.boxes`).
"""

from __future__ import annotations

from qkvcli.core.vocabulary import BRANCHES

ROLES = BRANCHES
"""The branches in their declared order."""
LETTERS = {"query": "Q", "key": "K", "value": "V"}
ROLE_SENTENCES = {
    "query": "Query: what should this position retrieve?",
    "key": "Key: how can this position be matched?",
    "value": "Value: what content can this position contribute?",
}
ROLE_STYLES = {"query": "cyan", "key": "magenta", "value": "yellow"}
INPUT_STYLE = "blue"
