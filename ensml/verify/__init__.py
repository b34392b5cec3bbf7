"""Verification: score forecasts against analyses (``ensml evaluate``), extreme-event cases, tables, maps.

:mod:`.evaluate` scores raw ensembles, predictions, calibrated members and the oracle by lead
time; :mod:`.inputs` checks what it reads; :mod:`.cases`, :mod:`.casefind` and :mod:`.casestudy`
define, find and score extreme-event cases; :mod:`.tables` writes and prints score tables and
:mod:`.maps` draws every map (offline).
"""
