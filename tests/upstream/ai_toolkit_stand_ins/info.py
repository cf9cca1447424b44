"""Stands in for ai-toolkit's top-level ``info`` module, which the fork DanceGRPO-kontext's vendored
``toolkit/metadata.py`` imports at module level (the software name and version it writes into saved
safetensors metadata). The fork's snapshot lacks it; no smoke run saves through ai-toolkit."""

software_meta = {"name": "ai-toolkit (stood in by tests/upstream/ai_toolkit_stand_ins)", "version": "0"}
