"""Programmers: reconfigure a slot with a bitstream, one backend each; and the bitstream catalog."""
