"""What people read: log lines, gRPC's log records cut to one line, and plain tables."""
