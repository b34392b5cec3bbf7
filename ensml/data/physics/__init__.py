"""The physics testbed: an ensemble from a spectral primitive-equation core with Held–Suarez forcing.

:mod:`~ensml.data.physics.forcing` holds the forcing, :mod:`~ensml.data.physics.core` the model
built on ``dinosaur-torch`` (the optional extra ``ensml[physics]``),
:mod:`~ensml.data.physics.generate` the ``ensml data physics`` command and
:mod:`~ensml.data.physics.stations` its stations (``--stations N``).
"""
