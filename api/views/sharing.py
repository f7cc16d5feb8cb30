"""Sharing an order's tracking: make a link, list the working ones, stop sharing.

The customer's side only. Whoever receives a link opens its page (``/t/<token>/``) and
socket (``/ws/share/<token>/``); the token opens nothing of the API.
"""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response

from api.schema import errors
from api.serializers.sharing import NewShareLinkSerializer, ShareLinkSerializer
from tracker.orders import policy
from tracker.sharing import selectors, services


class ShareLinksView(generics.GenericAPIView):
    """An order's shared tracking links: its customer's to make and revoke (anyone else
    who may see the order gets 403; anyone else, 404)."""

    serializer_class = ShareLinkSerializer
    throttle_scope = "shares"

    def _order(self, pk: int):
        """The order, if the caller may share it (404 / 403 otherwise)."""
        order = policy.visible_orders(self.request.user).filter(pk=pk).first()
        if order is None:
            raise policy.NotVisible(pk)
        if not policy.can_share(self.request.user, order):
            self.permission_denied(self.request, "Only the order's customer can share it.")
        return order

    @extend_schema(
        operation_id="listShareLinks",
        summary="List the order's working tracking links",
        description="Its customer only. Tokens are not kept, so a link's address cannot be "
        "shown again: make a new one to copy it.",
        responses={200: ShareLinkSerializer(many=True)},
    )
    def get(self, request: Request, pk: int) -> Response:
        links = selectors.live_links(self._order(pk))
        shown = [
            {"id": link.pk, "created_at": link.created_at, "expires_at": link.ends_at()}
            for link in links
        ]
        return Response(ShareLinkSerializer(shown, many=True).data)

    @extend_schema(
        operation_id="createShareLink",
        summary="Share the order's tracking",
        description="Its customer only. Answers a link whose page anyone can open without "
        "signing in to follow the delivery live: the status timeline, the courier on the map "
        "while out for delivery, the destination rounded to about 100 m and the arrival "
        "window; nothing else. The `token` is in this answer only. 409 when the order ended "
        "more than 30 minutes ago or already has 5 working links.",
        request=None,
        responses={201: NewShareLinkSerializer, **errors(409)},
    )
    def post(self, request: Request, pk: int) -> Response:
        link, token = services.create_link(pk, by=request.user)
        url = request.build_absolute_uri(reverse("frontend:share", args=[token]))
        body = {"id": link.pk, "created_at": link.created_at, "expires_at": link.ends_at(),
                "token": token, "url": url}  # fmt: skip
        response = Response(NewShareLinkSerializer(body).data, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"  # the token is in it
        return response

    @extend_schema(
        operation_id="revokeShareLinks",
        summary="Stop sharing the order's tracking",
        description="Its customer only. Revokes every link of the order at once; pages open "
        "on them stop within a second. Answers 204 also when there was nothing to revoke.",
        request=None,
        responses={204: OpenApiResponse(description="Every link of the order is revoked.")},
    )
    def delete(self, request: Request, pk: int) -> Response:
        services.revoke_links(pk, by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
