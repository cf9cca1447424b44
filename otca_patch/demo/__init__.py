"""The embedded CPU demo: a tiny FLUX-architecture model, pre-trained on synthetic prompt-conditioned
images, post-trained with DanceGRPO's FLUX GRPO mathematics under any credit mode of
``otca_patch.credit`` (``otca-patch demo``, ``otca-patch ablate``, ``otca-patch proxy``).

Modules, one job each: ``config`` (flags), ``data`` (synthetic set), ``model`` (tiny FLUX),
``pretrain`` (flow matching + cache), ``sampling`` (sigma schedule, SDE step, log-probability),
``objectives`` (rewards), ``grpo`` (rollout, credit, PPO update), ``evaluation`` (fixed eval set,
balanced score), ``jobs`` (runs inline or in processes), ``experiment`` (one comparison),
``report`` / ``plots`` (report folder), ``cli`` / ``ablate`` / ``proxy`` (commands).
Nothing is imported here, so ``import otca_patch.demo`` stays cheap.
"""
