"""The only code that talks to the API server (through the blocking ``kubernetes`` client).

Every call runs in a worker thread; results reach the event loop as small frozen values,
and client errors are wrapped (``KubeError``) or logged here.
"""
