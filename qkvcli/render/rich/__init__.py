"""The rich terminal views: each view draws its report's facts (:mod:`qkvcli.render.facts`)
through one kit (``drawn``: a fact as a cell, a section's facts as a config line, check
entries as the one verdicts list and the verdict, a tensor as its tables), sections as cards
(``layout.card``) holding text and tables built one way (``tables.table``: columns by what
they hold, no number ever cut), rows of them side by side when they fit (``layout.beside``);
the boxes, the large-table grid and the heat maps are their own renderables. Imported only
when a rich view is asked for.
"""
