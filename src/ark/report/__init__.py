"""The report: every table and figure from the stored runs, their intervals, the reproduction check, and ``ark show``."""
