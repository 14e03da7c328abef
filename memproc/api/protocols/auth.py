"""Authentication of the protocol endpoints: the project's DRF classes, plus DRF's authtoken tokens
sent as `Authorization: Bearer <key>` (how the OpenAI clients send their `api_key`) when the project
installs `rest_framework.authtoken`."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.request import Request
from rest_framework.settings import api_settings

AUTHTOKEN_APP = "rest_framework.authtoken"
AUTHENTICATE_HEADER = 'Bearer realm="memproc"'


class BearerTokenAuthentication(TokenAuthentication):
    """DRF's token authentication under the `Bearer` keyword. A key that is no authtoken token is left
    to the project's other classes (a site's JWTs also travel as `Bearer`), so it never shadows them."""

    keyword = "Bearer"

    def authenticate_credentials(self, key: str) -> Any:
        model = self.get_model()
        token = model.objects.select_related("user").filter(key=key).first()
        if token is None:
            return None
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return (token.user, token)


def authenticator_classes() -> list[type]:
    """Bearer tokens first when authtoken is installed, then the project's DEFAULT_AUTHENTICATION_CLASSES."""
    classes = list(api_settings.DEFAULT_AUTHENTICATION_CLASSES)
    if apps.is_installed(AUTHTOKEN_APP):
        classes = [BearerTokenAuthentication, *(c for c in classes if c is not BearerTokenAuthentication)]
    return classes


class ProtocolAuthMixin:
    """For protocol views: their authenticators, a 401 (never a 403) for a caller without valid
    credentials, and "invalid credentials" rather than "none given" when a header was sent."""

    def get_authenticators(self) -> list[Any]:
        return [cls() for cls in authenticator_classes()]

    def get_authenticate_header(self, request: Request) -> str:
        return AUTHENTICATE_HEADER

    def permission_denied(
        self, request: Request, message: str | None = None, code: str | None = None
    ) -> None:
        if request.authenticators and not request.successful_authenticator:
            if request.META.get("HTTP_AUTHORIZATION"):
                raise exceptions.AuthenticationFailed("Invalid credentials: the token is unknown or expired.")
            raise exceptions.NotAuthenticated()
        super().permission_denied(request, message=message, code=code)  # type: ignore[misc]
