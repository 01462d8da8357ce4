"""The rich terminal views: each view is sections drawn as cards (``layout.card``) holding
text, tables built one way (``tables.table``: columns by what they hold, no number ever cut)
and rows of them side by side when they fit (``layout.beside``); the boxes, the large-table
grid and the heat maps are their own renderables. Imported only when a rich view is asked for.
"""
