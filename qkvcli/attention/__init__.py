"""Attention on top of the projections: one head (scores, softmax, mix) and multi-head layers, the
layer an attend fixture describes (judged when read, built for a run), gradient checks and
evidence records (data, no prose).
"""
