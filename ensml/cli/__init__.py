"""The ``ensml`` command: :mod:`.main` dispatches to one thin module per verb."""
