"""The environment variables through which otca-patch's commands (``otca-patch launch`` above all)
talk to the processes they start: the one place their names are written.

Standard library only, and importing nothing: the start-up hook (``launch/startup/sitecustomize.py``)
loads this file by its path in every Python process of a launch, before otca_patch may be imported
(importing the package there would import torch). Everything else imports it as a module.
"""

#: the layer's flags (``--otca ...``), shell-quoted: upstream's launch scripts pass fixed arguments
ARGS = "OTCA_PATCH_ARGS"
#: the targeted upstream files, a JSON list ("/"-separated paths inside the checkout, or absolute
#: ``--otca_target`` paths): the start-up hook's standard-library check of each process's script
TARGETS = "OTCA_PATCH_TARGETS"
#: per spec, ``[NAME, FILE, TRAINER PATH HERE or ""]`` (JSON): how the start-up hook recognises a
#: copy of a trainer and names the nearest spec
SHAPES = "OTCA_PATCH_SHAPES"
#: the launch record: the file each process of the launch appends its check-in, what it ran and its
#: first error to
RECORD = "OTCA_PATCH_RECORD"
#: the command the messages of a launch's processes start with (``otca-patch launch``)
COMMAND = "OTCA_PATCH_COMMAND"
#: the folder the command was started in: paths are printed relative to it
STARTED_IN = "OTCA_STARTED_IN"

#: set by ``otca-patch ab`` for its sides once it has warned of a copy of a trainer left unused
#: (``hooks.copies``): each side's smoke or launch then does not say it again
COPY_NOTE_SAID = "OTCA_COPY_NOTE_SAID"

#: every variable the launch sets for the layer: none of them reaches a launch without ``--otca``
LAYER = (ARGS, TARGETS, SHAPES, RECORD, COMMAND)
