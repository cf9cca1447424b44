"""The launch rehearsal: each target's real upstream ``main()`` started by upstream's own launch
script run as it is, set-up lines included (``verbatim``), on the CPU (or, for the GPU check, on
CUDA), run three times: with no wrapper, under ``otca-patch launch`` without ``--otca``, and under
``--otca`` (``python -m otca_patch.rehearsal``, ``scripts/launch_rehearsal.sh``).

Each family module (``dancegrpo``, ``mixgrpo``, ``flowgrpo``) exposes ``TARGETS`` and
``plan(target, work, device) -> Plan``; ``runner`` runs the plans and prints one line per target."""
