"""The runtimes of the upstream trainers the layer patches. ``base`` (every target's runtime),
``dancegrpo`` and ``flowgrpo`` (what each trainer family shares: a trainer that follows its family
uses the family runtime itself), a module per trainer whose hook points need more, and ``registry``
(a spec's runtime class, built as ``Class(config, spec)``). Targets are registered by their specs."""
