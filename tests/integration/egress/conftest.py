from tests.fixtures.egress import egress_sandbox, egress_server, upstream

__all__ = ["egress_sandbox", "egress_server", "upstream"]
