"""Experiment configs: one ``get_config(arg)`` module per experiment (see configs/common.py).

Launched as files (``--config=configs/ran/demo.py:tiny``) or imported as modules
(``import configs.ran.demo``) from the repository root.
"""
