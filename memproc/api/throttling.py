"""memproc's default throttle: per user (per IP when anonymous), scope "memproc"."""

from __future__ import annotations

from rest_framework.settings import api_settings
from rest_framework.throttling import UserRateThrottle


class MemprocUserThrottle(UserRateThrottle):
    """Rate from `REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["memproc"]` when the project sets it (`None`
    turns it off), else `fallback_rate`, so a project with no throttle rates needs no set-up."""

    scope = "memproc"
    fallback_rate = "600/minute"

    def get_rate(self) -> str | None:
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        if self.scope in rates:
            return rates[self.scope]
        return self.fallback_rate
