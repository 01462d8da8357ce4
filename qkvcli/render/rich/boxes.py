"""Boxes and branch styles of the rich view.

How the rich figure names and colours the three branches and the shared input.

Colour only ever adds to a border or a word (the borders themselves are in
:mod:`qkvcli.render.rich.boxes`).

The figure's borders: one per role, each with an ASCII fallback of its own.

The chapter tells the branches apart by border, not by colour: the shared input is
heavy, query solid, key dashed, value double; evidence cards are rounded. rich swaps
*every* non-ASCII box for the same ``+--+`` box on a stream that cannot encode
Unicode, which would make the three branches look alike, so :class:`RoleBox` carries
its own ASCII spelling and returns it instead.

A box is eight lines of four characters (see :class:`rich.box.Box`): top, head,
head_row, mid, row, foot_row, foot, bottom.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.box import Box

from qkvcli.core.names import BRANCHES

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


if TYPE_CHECKING:
    from rich.console import ConsoleOptions


class RoleBox(Box):
    """A :class:`~rich.box.Box` whose ASCII substitute is ``fallback``, not rich's shared one."""

    def __init__(self, box: str, fallback: Box) -> None:
        super().__init__(box)
        self.fallback = fallback

    def substitute(self, options: ConsoleOptions, safe: bool = True) -> Box:
        """This box, or its own ASCII fallback when the stream cannot show it.

        Legacy Windows consoles lack the dashed and rounded glyphs, so they get the
        fallback too (only when ``safe``, as rich does).
        """
        if options.ascii_only or (options.legacy_windows and safe):
            return self.fallback
        return self


def _ascii(box: str) -> Box:
    return Box(box, ascii=True)


# fmt: off
INPUT = RoleBox(
    "┏━┳┓\n"
    "┃ ┃┃\n"
    "┣━╋┫\n"
    "┃ ┃┃\n"
    "┣━╋┫\n"
    "┣━╋┫\n"
    "┃ ┃┃\n"
    "┗━┻┛\n",
    _ascii(
        "*~**\n"
        "! !!\n"
        "*~**\n"
        "! !!\n"
        "*~**\n"
        "*~**\n"
        "! !!\n"
        "*~**\n"
    ),
)
"""Shared input: heavy (ASCII ``*~*!``)."""

QUERY = RoleBox(
    "┌─┬┐\n"
    "│ ││\n"
    "├─┼┤\n"
    "│ ││\n"
    "├─┼┤\n"
    "├─┼┤\n"
    "│ ││\n"
    "└─┴┘\n",
    _ascii(
        "+-++\n"
        "| ||\n"
        "+-++\n"
        "| ||\n"
        "+-++\n"
        "+-++\n"
        "| ||\n"
        "+-++\n"
    ),
)
"""Query: solid (ASCII ``+-+|``)."""

KEY = RoleBox(
    "┌┄┬┐\n"
    "┆ ┆┆\n"
    "├┄┼┤\n"
    "┆ ┆┆\n"
    "├┄┼┤\n"
    "├┄┼┤\n"
    "┆ ┆┆\n"
    "└┄┴┘\n",
    _ascii(
        "+.++\n"
        ": ::\n"
        "+.++\n"
        ": ::\n"
        "+.++\n"
        "+.++\n"
        ": ::\n"
        "+.++\n"
    ),
)
"""Key: dashed (ASCII ``+.+:``)."""

VALUE = RoleBox(
    "╔═╦╗\n"
    "║ ║║\n"
    "╠═╬╣\n"
    "║ ║║\n"
    "╠═╬╣\n"
    "╠═╬╣\n"
    "║ ║║\n"
    "╚═╩╝\n",
    _ascii(
        "#=##\n"
        "H HH\n"
        "#=##\n"
        "H HH\n"
        "#=##\n"
        "#=##\n"
        "H HH\n"
        "#=##\n"
    ),
)
"""Value: double (ASCII ``#=#H``)."""

CARD = RoleBox(
    "╭─┬╮\n"
    "│ ││\n"
    "├─┼┤\n"
    "│ ││\n"
    "├─┼┤\n"
    "├─┼┤\n"
    "│ ││\n"
    "╰─┴╯\n",
    _ascii(
        ".-..\n"
        "| ||\n"
        "|-+|\n"
        "| ||\n"
        "|-+|\n"
        "|-+|\n"
        "| ||\n"
        "'-''\n"
    ),
)
"""Evidence cards: rounded (ASCII ``.-.`` over ``'-'``), so no card looks like a branch."""

PLAIN = RoleBox(
    "    \n"
    "    \n"
    " ── \n"
    "    \n"
    "    \n"
    "    \n"
    "    \n"
    "    \n",
    _ascii(
        "    \n"
        "    \n"
        " -- \n"
        "    \n"
        "    \n"
        "    \n"
        "    \n"
        "    \n"
    ),
)
"""Tables inside cards that belong to no branch: a rule under the header only."""
# fmt: on

ROLE_BOXES: dict[str, RoleBox] = {"query": QUERY, "key": KEY, "value": VALUE}
"""The branch borders, in the declared order query, key, value."""
