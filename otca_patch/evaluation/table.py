"""The paper's Table 1 layout: one row per checkpoint, one column per metric (mean over prompts)."""
from __future__ import annotations

#: column titles as the paper prints them
TITLES = {"clip_t": "CLIP-T", "aesthetic": "Aesthetic", "hpsv2": "HPSv2.1", "pickscore": "PickScore",
          "imagereward": "ImageReward"}


def format_table(rows: list[tuple[str, dict[str, float]]], metrics: list[str], prompts: int) -> str:
    """Markdown table; ``rows`` are (checkpoint label, {metric: mean}) in order."""
    header = ["checkpoint", *[TITLES.get(m, m) for m in metrics]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * len(metrics)) + "|"]
    for label, means in rows:
        lines.append("| " + " | ".join([label, *[f"{means[m]:.4f}" for m in metrics]]) + " |")
    lines.append(f"\nMean over {prompts} prompts, one image per prompt (higher is better for every column).")
    return "\n".join(lines)
