"""What people read: log lines (one per event, bounded, text or JSON), gRPC's undecodable-request
records cut to one line, and the plain tables the commands and demos print.
"""
