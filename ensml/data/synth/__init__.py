"""The embedded synthetic ensemble: a known predictive distribution, written as ENS-10-like files.

:func:`synth` writes forecast, analysis and oracle (``ensml data synth``); the generative model
is :mod:`.model` (truth, oracle and members as arrays), its random fields and idealised physics
:mod:`.fields`, precipitation and wind with their non-Gaussian oracles :mod:`.precip_wind` (their
quantile functions :mod:`.quantiles`), and the datasets and encodings :mod:`.build`.
"""

from ensml.data.synth.build import SynthConfig
from ensml.data.synth.generate import synth

__all__ = ["SynthConfig", "synth"]
