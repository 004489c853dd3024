"""An API server stand-in at the HTTP level, for the real ``kubernetes`` client: ``fpga-agent demo dra`` runs
the agent against it, and the tests extend it (``tests/fakeapi.py``).

It behaves as the real server in what the demo's agent sends it: lists, watches, field selectors, merge patches;
the tests' server adds label selectors, exact and paged lists, bookmarks, the other patch types, FpgaNodeState
writes and the real server's checks of slices, Events and FpgaNodeStates.
Not emulated: ``sendInitialEvents``, server-side apply, TLS."""
