"""Verification: score forecasts against analyses (``ensml evaluate``), extreme-event cases, tables, maps.

:mod:`.evaluate` scores raw ensembles, predictions, calibrated members and the oracle by lead
time, in the one pass over the leads of :mod:`.frame_scores`; :mod:`.families` reads each
predictive distribution's family and scores its CRPS; :mod:`.events` and :mod:`.thresholds`
score bounded variables (precipitation, wind speed) at event thresholds, written by
:mod:`.event_tables` with :mod:`.charts`' reliability diagrams; :mod:`.inputs` checks what it
reads; :mod:`.cases`, :mod:`.casefind` and :mod:`.casestudy` define, find and score
extreme-event cases; :mod:`.tables` writes and prints score tables and :mod:`.maps` draws every
map (offline).
"""
