"""Operators' view of API tokens: who is signed in where, and since when; never a key
(it is not kept) nor its digest. Deleting a token signs that app out (its sockets close
within a second); tokens are made only by signing in."""

from django.contrib import admin

from tracker.accounts.models import ApiToken
from tracker.accounts.security import token_expired


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["id", "user", "client", "created", "expired"]
    list_filter = ["created"]
    search_fields = ["user__username", "client"]
    list_select_related = ["user"]
    date_hierarchy = "created"
    fields = ["user", "client", "created", "expired"]
    readonly_fields = fields

    @admin.display(boolean=True, description="expired")
    def expired(self, token: ApiToken) -> bool:
        return token_expired(token)

    def has_add_permission(self, request) -> bool:
        return False  # a key is shown only to the client signing in

    def has_change_permission(self, request, obj=None) -> bool:
        return False
