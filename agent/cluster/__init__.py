"""The cluster side outside the scheduler's request path: ``extenderservice`` runs the extender as a service
(watches, servers), ``view`` reads the published slot state for ``fpga-agent cluster``."""
