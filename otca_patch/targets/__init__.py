"""The upstream trainers the layer patches. ``base`` (every target's runtime), ``dancegrpo`` and
``flowgrpo`` (what each trainer family shares), ``descriptor`` / ``registry`` (the ``Target``
facts generic code reads), and one module per upstream script: its runtime and its ``TARGET``."""
