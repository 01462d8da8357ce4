"""Attention on top of the projections: one head (scores, softmax, mix) and multi-head layers, the
layer an attend fixture describes (read whole by reading/, then judged once as it is built),
gradient checks and evidence records (data, no prose).
"""
