"""The embedded CPU demo: a tiny FLUX-architecture model, pre-trained on a corrupted mixture of
synthetic prompt-conditioned images, post-trained with DanceGRPO's FLUX GRPO mathematics under any
credit variant of ``otca_patch.credit`` (``otca-patch demo``, ``otca-patch ablate``,
``otca-patch proxy``).

Modules, one job each: ``config`` (flags), ``data`` (the task: clean renders and the corrupted
mixture), ``model`` (tiny FLUX), ``pretrain`` (flow matching + cache), ``sampling`` (sigma schedule,
SDE step, log-probability), ``pixel_rewards`` (the three bounded objectives), ``variants`` (credit
modes and ablation controls), ``grpo`` (rollout, credit, PPO update), ``evaluation`` (fixed eval set,
oracle, gap closed, drift), ``stats`` (seed intervals, Pareto verdict), ``jobs`` (runs inline or in
processes), ``experiment`` (one paired comparison), ``report`` / ``plots`` (report folder), ``cli`` /
``ablate`` / ``proxy_command`` (commands). Nothing is imported here, so ``import otca_patch.demo``
stays cheap.
"""
