"""fpga-slot: a Kubernetes device plugin that hands out FPGA slots and programs them per pod."""

__version__ = "0.1.0"
