"""Suite-wide fixtures. Organised as a ladder: server → sandbox → running command."""
