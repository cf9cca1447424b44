"""otca-patch: OTCA credit assignment for DanceGRPO / FlowGRPO."""
__version__ = "0.1.0"
