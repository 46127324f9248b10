"""Sandbox egress: off by default, allow-listed by host and port, through one audited proxy.

Inside a sandbox, the guest relays ``127.0.0.1:3128`` to ``/run/sandgate/egress.sock``; here,
each connection on that socket is one proxy request, judged against the sandbox's rules,
resolved and checked by the gateway, dialled at the checked address, then forwarded (one
HTTP request whose Host names that authority) or spliced. Modules: ``names`` (canonical
hosts), ``rules`` (what a sandbox may reach; presets live in ``config``), ``addresses``
(which IPs are dialable), ``resolver``, ``request`` (strict proxy request parsing),
``authority`` (the Host check), ``exchange`` (one forwarded request), ``clienthello``,
``intercept`` and ``tls`` (terminated tunnels), ``placeholders`` (secrets), ``tunnel`` (the
socket and its connections), ``hook`` (lifecycle).
"""

from sandgate.egress.hook import PROXY_ENV, EgressHook
from sandgate.egress.rules import Decision, EgressPolicy, build_policy

__all__ = ["PROXY_ENV", "Decision", "EgressHook", "EgressPolicy", "build_policy"]
