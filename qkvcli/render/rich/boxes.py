"""Boxes and branch styles of the rich views: how a figure names, colours and borders the
three branches and the shared input.

The chapter tells the branches apart by border, not colour (colour only adds): the shared
input heavy, query solid, key dashed, value double, evidence cards rounded. rich swaps
*every* non-ASCII box for one ``+--+`` box on a stream that cannot encode Unicode, which
would make the branches alike, so a :class:`RoleBox` carries its own ASCII spelling. A box
is eight lines of four characters (:class:`rich.box.Box`): top, head, head_row, mid, row,
foot_row, foot, bottom.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.box import Box

from qkvcli.core.names import BRANCHES

if TYPE_CHECKING:
    from rich.console import ConsoleOptions

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


def _framed(unicode: tuple[str, str, str, str], ascii: tuple[str, str, str, str]) -> RoleBox:
    """A box whose rows are all the second line and whose dividers (under the head,
    between rows, above the foot) are all the third, in Unicode and in ASCII."""
    def frame(top: str, row: str, divider: str, bottom: str) -> str:
        return "".join(f"{line}\n" for line in (top, row, divider, row, divider, divider, row,
                                                 bottom))

    return RoleBox(frame(*unicode), Box(frame(*ascii), ascii=True))


INPUT = _framed(("┏━┳┓", "┃ ┃┃", "┣━╋┫", "┗━┻┛"), ("*~**", "! !!", "*~**", "*~**"))
"""Shared input: heavy (ASCII ``*~*!``)."""
QUERY = _framed(("┌─┬┐", "│ ││", "├─┼┤", "└─┴┘"), ("+-++", "| ||", "+-++", "+-++"))
"""Query: solid (ASCII ``+-+|``)."""
KEY = _framed(("┌┄┬┐", "┆ ┆┆", "├┄┼┤", "└┄┴┘"), ("+.++", ": ::", "+.++", "+.++"))
"""Key: dashed (ASCII ``+.+:``)."""
VALUE = _framed(("╔═╦╗", "║ ║║", "╠═╬╣", "╚═╩╝"), ("#=##", "H HH", "#=##", "#=##"))
"""Value: double (ASCII ``#=#H``)."""
CARD = _framed(("╭─┬╮", "│ ││", "├─┼┤", "╰─┴╯"), (".-..", "| ||", "|-+|", "'-''"))
"""Evidence cards: rounded (ASCII ``.-.`` over ``'-'``), so no card looks like a branch."""
PLAIN = RoleBox("    \n    \n ── \n" + "    \n" * 5,
                Box("    \n    \n -- \n" + "    \n" * 5, ascii=True))
"""Tables inside cards that belong to no branch: a rule under the header only."""

ROLE_BOXES: dict[str, RoleBox] = {"query": QUERY, "key": KEY, "value": VALUE}
"""The branch borders, in the declared order query, key, value."""
BOXES: dict[str, tuple[RoleBox, str | None]] = {
    "input": (INPUT, INPUT_STYLE), "plain": (PLAIN, None),
    **{role: (ROLE_BOXES[role], ROLE_STYLES[role]) for role in ROLES}}
"""Each role's box and style: the shared input, a table of no branch, each branch."""
