"""The rich terminal view: figures of the evidence built from boxes, tables and cards. Imported only when
a rich view is asked for.
"""
