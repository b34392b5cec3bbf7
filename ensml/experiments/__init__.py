"""Experiments built on ensml: the model-zoo benchmark, the parallel-layout planner, real-data checks.

Not part of the training or verification code paths; each module is a command (``ensml benchmark``,
``ensml plan-parallel``) or a script (``python -m ensml.experiments.real_spread``).
"""
