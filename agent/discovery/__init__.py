"""Discovery backends (each a :class:`DeviceSource`): find the node's FPGA slots and keep their health current."""
