"""Scoring: STaRK-exact ranking metrics, per-query scores, and trajectory statistics."""
