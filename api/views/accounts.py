"""Signing in and out, who I am, my delivery addresses."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import authenticate, logout
from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import generics, permissions, status, viewsets
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.permissions import IsCustomer
from api.serializers.accounts import (
    AddressSerializer,
    LoginSerializer,
    MeSerializer,
    SignedOutSerializer,
    SocketTicketSerializer,
    TokenSerializer,
)
from tracker.accounts import services as accounts
from tracker.accounts.models import ApiToken
from tracker.customers import services
from tracker.customers.models import Address
from tracker.notifications import services as notifications
from tracker.orders import policy


class TokenLoginView(APIView):
    """Exchange a username and password for an API token of this sign-in's own; send it as
    `Authorization: Token <token>`. The key is in this answer only (the server keeps its
    digest). Tokens expire; a 401 means sign in again."""

    authentication_classes: list = []
    permission_classes = [permissions.AllowAny]
    throttle_scope = "login"

    def get_authenticate_header(self, request: Request) -> str:
        return 'Token realm="api"'  # so wrong credentials are a 401, not a 403

    @extend_schema(
        operation_id="signIn",
        summary="Sign in for a token",
        request=LoginSerializer,
        responses={200: TokenSerializer},
        examples=[
            OpenApiExample("Sign in", {"username": "customer1", "password": "…"}, request_only=True)
        ],
    )
    def post(self, request: Request) -> Response:
        body = LoginSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = authenticate(request, **body.validated_data)
        if user is None or not user.is_active:
            raise AuthenticationFailed("Wrong username or password.")
        issued = accounts.issue_token(user, body.validated_data.get("client", ""))
        return Response(TokenSerializer({"token": issued.key, "user": user}).data)


class LogoutView(APIView):
    """Revoke the token the request came with (this app only: the user's other sign-ins
    stay) and end the browser session."""

    @extend_schema(
        operation_id="signOut",
        summary="Sign out (this token)",
        request=None,
        responses={204: None},
    )
    def post(self, request: Request) -> Response:
        if isinstance(request.auth, ApiToken):
            accounts.sign_out(request.auth)
        logout(request._request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class LogoutEverywhereView(APIView):
    """Revoke every API token of the caller (every app on every device signs in again;
    their open sockets close within a second), delete every Web Push subscription of
    theirs, and end this browser session."""

    @extend_schema(
        operation_id="signOutEverywhere",
        summary="Sign out everywhere (every token)",
        request=None,
        responses={200: SignedOutSerializer},
    )
    def post(self, request: Request) -> Response:
        revoked = accounts.sign_out_everywhere(request.user)
        notifications.forget_user(request.user)
        logout(request._request)
        return Response(SignedOutSerializer({"tokens_revoked": revoked}).data)


class SocketTicketView(APIView):
    """A ticket that opens one WebSocket, once, within `SOCKET_TICKET_SECONDS` (30):
    for clients that cannot set `Authorization` on a WebSocket (a browser holding a
    token), instead of the key in the URL. It stands for the credential of this request
    (its token, or the browser's session): revoking that closes the socket."""

    throttle_scope = "writes"

    @extend_schema(
        operation_id="createSocketTicket",
        summary="A one-time ticket to open a WebSocket",
        request=None,
        responses={201: SocketTicketSerializer},
    )
    def post(self, request: Request) -> Response:
        token = request.auth if isinstance(request.auth, ApiToken) else None
        session = None if token else request.session.session_key
        ticket = accounts.issue_socket_ticket(request.user, token, session)
        expires = timezone.now() + timedelta(seconds=settings.SOCKET_TICKET_SECONDS)
        body = SocketTicketSerializer({"ticket": ticket, "expires_at": expires})
        return Response(body.data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(
        operation_id="getMe", summary="Who I am", description="My profile and the roles I hold."
    )
)
class MeView(generics.RetrieveAPIView):
    serializer_class = MeSerializer

    def get_object(self):
        return self.request.user


@extend_schema_view(
    list=extend_schema(operation_id="listAddresses", summary="List my delivery addresses"),
    create=extend_schema(operation_id="createAddress", summary="Add a delivery address"),
    retrieve=extend_schema(operation_id="getAddress", summary="Get one of my addresses"),
    update=extend_schema(operation_id="replaceAddress", summary="Replace one of my addresses"),
    partial_update=extend_schema(
        operation_id="updateAddress", summary="Change one of my addresses"
    ),
    destroy=extend_schema(operation_id="deleteAddress", summary="Delete one of my addresses"),
)
class AddressViewSet(viewsets.ModelViewSet):
    """My delivery addresses, at most `CUSTOMER_MAX_ADDRESSES` (20); another customer's
    answer 404. `is_default: true` makes an address my only default; deleting the default
    makes the oldest remaining address the default. Writes spend the `writes` budget,
    reads the `reads` budget."""

    serializer_class = AddressSerializer
    permission_classes = [IsCustomer]
    pagination_class = None
    throttle_scope = "writes"

    def get_queryset(self):
        return policy.customer_of(self.request.user).addresses.all()

    def perform_create(self, serializer: AddressSerializer) -> None:
        customer = policy.customer_of(self.request.user)
        serializer.instance = services.add_address(customer, **serializer.validated_data)

    def perform_update(self, serializer: AddressSerializer) -> None:
        serializer.instance = services.change_address(
            serializer.instance, **serializer.validated_data
        )

    def perform_destroy(self, instance: Address) -> None:
        services.delete_address(instance)
