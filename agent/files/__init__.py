"""Files on the node's disk, standard library only: atomic installation, directory watching,
and what a bitstream file is called and how its identity is taken."""
