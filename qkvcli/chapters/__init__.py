"""The course's attention chapters 27–30: each a :class:`~qkvcli.chapters.registry.Chapter`
(parse, build), found by number through :mod:`qkvcli.chapters.registry`; 27 and 28 share
one head module (:mod:`qkvcli.chapters.head`)."""
