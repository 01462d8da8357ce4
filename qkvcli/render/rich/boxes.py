"""Boxes and branch styles of the rich view: how the figure names, colours and borders
the three branches and the shared input.

The chapter tells the branches apart by border, not by colour: the shared input is
heavy, query solid, key dashed, value double; evidence cards are rounded. Colour only
ever adds to a border or a word. rich swaps *every* non-ASCII box for the same ``+--+``
box on a stream that cannot encode Unicode, which would make the three branches look
alike, so :class:`RoleBox` carries its own ASCII spelling and returns it instead.

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


def _frame(top: str, row: str, divider: str, bottom: str) -> str:
    """The eight lines of a box whose rows are all ``row`` and whose dividers (under the
    head, between rows, above the foot) are all ``divider``."""
    return "".join(f"{line}\n" for line in (top, row, divider, row, divider, divider, row,
                                             bottom))


INPUT = RoleBox(_frame("┏━┳┓", "┃ ┃┃", "┣━╋┫", "┗━┻┛"), _ascii(_frame("*~**", "! !!", "*~**", "*~**")))
"""Shared input: heavy (ASCII ``*~*!``)."""
QUERY = RoleBox(_frame("┌─┬┐", "│ ││", "├─┼┤", "└─┴┘"), _ascii(_frame("+-++", "| ||", "+-++", "+-++")))
"""Query: solid (ASCII ``+-+|``)."""
KEY = RoleBox(_frame("┌┄┬┐", "┆ ┆┆", "├┄┼┤", "└┄┴┘"), _ascii(_frame("+.++", ": ::", "+.++", "+.++")))
"""Key: dashed (ASCII ``+.+:``)."""
VALUE = RoleBox(_frame("╔═╦╗", "║ ║║", "╠═╬╣", "╚═╩╝"), _ascii(_frame("#=##", "H HH", "#=##", "#=##")))
"""Value: double (ASCII ``#=#H``)."""
CARD = RoleBox(_frame("╭─┬╮", "│ ││", "├─┼┤", "╰─┴╯"), _ascii(_frame(".-..", "| ||", "|-+|", "'-''")))
"""Evidence cards: rounded (ASCII ``.-.`` over ``'-'``), so no card looks like a branch."""

PLAIN = RoleBox("    \n    \n ── \n" + "    \n" * 5, _ascii("    \n    \n -- \n" + "    \n" * 5))
"""Tables inside cards that belong to no branch: a rule under the header only."""

ROLE_BOXES: dict[str, RoleBox] = {"query": QUERY, "key": KEY, "value": VALUE}
"""The branch borders, in the declared order query, key, value."""
