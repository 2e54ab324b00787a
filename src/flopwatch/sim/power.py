"""The simulator's power model is the project's one device power model (:mod:`flopwatch.powermodel.device_power`)."""

from flopwatch.powermodel.device_power import PowerCell, PowerModel, build_power_model, power_model_for

__all__ = ["PowerCell", "PowerModel", "build_power_model", "power_model_for"]
