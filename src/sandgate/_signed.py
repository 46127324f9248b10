"""Expiry of the URLs Sandgate signs with a Unix-second deadline (envd file URLs, template
upload URLs)."""

from __future__ import annotations


def signature_expired(expiration: int, now: float) -> bool:
    """Whether a URL signed until the Unix second ``expiration`` has expired at ``now``.

    Whole seconds, as E2B's envd compares them: the SDKs sign ``int(time.time()) + N``, so a
    float comparison would give a URL anything from N - 1 to N seconds (no time at all for
    ``use_signature_expiration=1`` near the end of a second). A URL is good through the whole
    second it names."""
    return expiration < int(now)
