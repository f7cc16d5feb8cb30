"""Operators' view of shared tracking links: read-only, with one action, revoke (through the
service, as the signed-in operator: the policy decides). Links are neither added nor
deleted here: a customer makes them, and a revoked link stays as the record of who shared
what and when it stopped."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied

from tracker.orders import policy
from tracker.sharing import services
from tracker.sharing.models import ShareLink


@admin.action(description="Revoke selected links (their open pages stop within a second)")
def revoke(modeladmin, request, queryset):
    done, refused = 0, []
    for link in queryset:
        try:
            done += services.revoke_link(link.pk, by=request.user)
        except (PermissionDenied, policy.NotVisible) as exc:
            refused.append(str(exc))
    modeladmin.message_user(request, f"Revoked {done} link(s).", messages.SUCCESS)
    for reason in refused:
        modeladmin.message_user(request, reason, messages.ERROR)


@admin.register(ShareLink)
class ShareLinkAdmin(admin.ModelAdmin):
    list_display = ["id", "order", "created_by", "created_at", "ends_at", "revoked_at", "state"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "created_at"]
    search_fields = ["order__id", "created_by__username"]
    list_select_related = ["order", "created_by"]
    date_hierarchy = "created_at"
    actions = [revoke]
    # The token's digest stays off the page: it opens nothing, but nobody needs to see it.
    fields = ["order", "created_by", "created_at", "expires_at", "ends_at", "revoked_at", "state"]
    readonly_fields = fields

    @admin.display(description="works until")
    def ends_at(self, link: ShareLink):
        return link.ends_at()

    @admin.display(description="state")
    def state(self, link: ShareLink) -> str:
        return link.state()

    def has_add_permission(self, request) -> bool:
        return False  # customers make links (the API), which is the only way to see a token

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: the row is the record of the link
