"""Attention on top of the projections: one head (scores, softmax, mix) and multi-head layers, their
fixtures, gradient checks and evidence records (data, no prose).
"""
