"""The kubelet's DRA plugin protocol: registration and the DRAPlugin service over a :class:`ClaimPreparer`."""
