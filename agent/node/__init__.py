"""The node agent's shared core, used by both modes (device plugin and DRA); it imports neither."""
