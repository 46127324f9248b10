"""Signed file URLs expire on whole seconds, as E2B's envd has them: the SDKs sign
``int(time.time()) + N``, and ``use_signature_expiration=1`` must leave the caller time to use
the URL whatever the fraction of the second it was signed in."""

from __future__ import annotations

from sandgate._signed import signature_expired


def test_a_url_is_good_through_the_whole_second_it_names() -> None:
    signed_at = 1_700_000_000.999  # the SDK signs late in a second, with N = 1
    expiration = int(signed_at) + 1
    assert not signature_expired(expiration, signed_at)
    assert not signature_expired(expiration, signed_at + 0.5)  # the next second: still good
    assert not signature_expired(expiration, expiration + 0.999)
    assert signature_expired(expiration, expiration + 1.0)
    assert signature_expired(expiration, expiration + 3600)
